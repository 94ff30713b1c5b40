"""Realistic schemas with realistic instances, for the mask benchmarks.

Shapes follow what structured generation is used for: tool calls, extraction
records, API payloads, with free text, enums, bounded strings and numbers,
formats, nested arrays and the open objects pydantic emits by default.

Example:
    >>> all(len(c["instances"]) >= 4 for c in CASES)
    True
"""

from __future__ import annotations

from typing import Any

__all__ = ["CASES"]

_USER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 1},
        "name": {"type": "string", "minLength": 1, "maxLength": 80},
        "email": {"type": "string", "format": "email"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "bio": {"type": "string"},
        "roles": {"type": "array", "items": {"enum": ["admin", "editor", "viewer"]}, "uniqueItems": False},
        "active": {"type": "boolean"},
    },
    "required": ["id", "name", "email", "active"],
}
_USERS = [
    {"id": 1, "name": "Ada Lovelace", "email": "ada@analytical.org", "age": 36,
     "bio": "Wrote the first published algorithm intended for a machine.", "roles": ["admin"], "active": True},
    {"id": 42, "name": "Grace Hopper", "email": "grace.hopper@navy.mil", "age": 85,
     "bio": "Pioneer of compilers; popularised the term \"debugging\".", "roles": ["editor", "viewer"],
     "active": False},
    {"id": 7, "name": "José Álvarez", "email": "jose@example.es", "bio": "Ingeniero de datos en Málaga. 🚀",
     "roles": [], "active": True},
    {"id": 1001, "name": "李雷", "email": "li.lei@example.cn", "age": 29, "bio": "喜欢编程和音乐。", "active": True},
    {"id": 5, "name": "O'Brien", "email": "ob@x.io", "age": 0, "roles": ["viewer"], "active": True},
]

_TOOL = {
    "type": "object",
    "properties": {
        "name": {"enum": ["get_weather", "search_web", "send_email"]},
        "arguments": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": 200},
                "location": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
            },
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}
_TOOLS = [
    {"name": "get_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}},
    {"name": "search_web", "arguments": {"query": "best structured generation library for MLX", "max_results": 5}},
    {"name": "send_email", "arguments": {"query": "Meeting moved to 3pm, see you there!"}},
    {"name": "get_weather", "arguments": {"location": "São Paulo", "unit": "fahrenheit"}},
    {"name": "search_web", "arguments": {"query": "how to bake sourdough bread at home without a dutch oven",
                                         "max_results": 20}},
]

_ORDER = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^ORD-[0-9]{6}$"},
        "created": {"type": "string", "format": "date-time"},
        "customer": {"type": "object", "properties": {"name": {"type": "string"}, "phone": {"type": "string"}},
                     "required": ["name"]},
        "items": {
            "type": "array", "minItems": 1,
            "items": {"type": "object",
                      "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                                     "title": {"type": "string"},
                                     "qty": {"type": "integer", "minimum": 1},
                                     "price": {"type": "number", "minimum": 0}},
                      "required": ["sku", "qty", "price"], "additionalProperties": False},
        },
        "status": {"enum": ["pending", "shipped", "delivered", "cancelled"]},
        "notes": {"type": ["string", "null"]},
    },
    "required": ["order_id", "created", "items", "status"],
    "additionalProperties": False,
}
_ORDERS = [
    {"order_id": "ORD-000123", "created": "2024-05-01T12:30:00Z", "customer": {"name": "Bob Smith"},
     "items": [{"sku": "ABC-123", "title": "USB-C cable, 2 m", "qty": 2, "price": 9.99}],
     "status": "shipped", "notes": None},
    {"order_id": "ORD-998877", "created": "2023-12-24T23:59:59+01:00",
     "customer": {"name": "Zoë", "phone": "+33 6 12 34 56 78"},
     "items": [{"sku": "XYZ-001", "qty": 1, "price": 1299.0}, {"sku": "XYZ-002", "title": "Case", "qty": 3,
                                                              "price": 19.5}],
     "status": "pending", "notes": "Leave at the door, please."},
    {"order_id": "ORD-555555", "created": "2025-01-15T08:00:00.123Z",
     "items": [{"sku": "QQQ-999", "title": "Gift card", "qty": 10, "price": 25}], "status": "delivered"},
    {"order_id": "ORD-100200", "created": "2022-02-28T00:00:00Z", "customer": {"name": "Ann"},
     "items": [{"sku": "AAA-111", "qty": 1, "price": 0.5}], "status": "cancelled", "notes": "Duplicate order."},
]

_EXTRACT = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "summary": {"type": "string", "maxLength": 300},
        "sentiment": {"enum": ["positive", "neutral", "negative"]},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "keywords": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 8},
        "entities": {"type": "array", "items": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "type": {"enum": ["PERSON", "ORG", "LOC", "DATE"]},
                           "start": {"type": "integer", "minimum": 0}},
            "required": ["text", "type"]}},
    },
    "required": ["title", "summary", "sentiment"],
}
_EXTRACTS = [
    {"title": "Quarterly results beat expectations",
     "summary": "The company reported revenue of $12.3B, up 8% year over year, driven by cloud services.",
     "sentiment": "positive", "score": 0.87, "keywords": ["earnings", "cloud", "revenue"],
     "entities": [{"text": "Contoso", "type": "ORG", "start": 0}, {"text": "Q3 2024", "type": "DATE"}]},
    {"title": "Storm disrupts flights in Northern Europe",
     "summary": "Hundreds of flights were cancelled in Amsterdam and Copenhagen as winds reached 120 km/h.",
     "sentiment": "negative", "score": 0.12, "keywords": ["weather", "travel"],
     "entities": [{"text": "Amsterdam", "type": "LOC"}, {"text": "Copenhagen", "type": "LOC", "start": 52}]},
    {"title": "Nouvelle bibliothèque à Lyon", "summary": "La ville inaugure une médiathèque de 5 000 m².",
     "sentiment": "neutral", "keywords": ["culture"], "entities": []},
    {"title": "Interview", "summary": "A short talk with the CEO about plans for 2025 and beyond.",
     "sentiment": "neutral", "score": 0.5,
     "entities": [{"text": "Jane Doe", "type": "PERSON", "start": 27}]},
]

_EVENT = {
    "$defs": {
        "Attendee": {"type": "object", "properties": {
            "name": {"type": "string"}, "email": {"type": "string", "format": "email"},
            "rsvp": {"enum": ["yes", "no", "maybe"]}}, "required": ["name", "rsvp"]},
    },
    "type": "object",
    "properties": {
        "event": {"type": "string", "minLength": 3, "maxLength": 100},
        "date": {"type": "string", "format": "date"},
        "duration_minutes": {"type": "integer", "multipleOf": 15, "minimum": 15, "maximum": 480},
        "location": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "attendees": {"type": "array", "items": {"$ref": "#/$defs/Attendee"}, "maxItems": 10},
        "recurring": {"type": "boolean"},
    },
    "required": ["event", "date", "attendees"],
    "additionalProperties": False,
}
_EVENTS = [
    {"event": "Team standup", "date": "2024-06-03", "duration_minutes": 15, "location": "Room 4B",
     "attendees": [{"name": "Sam", "rsvp": "yes"}, {"name": "Kim", "email": "kim@corp.com", "rsvp": "maybe"}],
     "recurring": True},
    {"event": "Quarterly planning offsite", "date": "2024-09-12", "duration_minutes": 480, "location": None,
     "attendees": [{"name": "Alex Chen", "email": "alex.chen@corp.com", "rsvp": "yes"}], "recurring": False},
    {"event": "1:1", "date": "2025-01-07", "attendees": []},
    {"event": "Déjeuner d'équipe", "date": "2024-12-20", "duration_minutes": 90, "location": "Café de Flore",
     "attendees": [{"name": "Élodie", "rsvp": "no"}, {"name": "Marc", "rsvp": "yes"},
                   {"name": "Nina", "email": "nina@exemple.fr", "rsvp": "yes"}]},
]

CASES: list[dict[str, Any]] = [
    {"name": "user_profile", "schema": _USER, "instances": _USERS},
    {"name": "tool_call", "schema": _TOOL, "instances": _TOOLS},
    {"name": "order", "schema": _ORDER, "instances": _ORDERS},
    {"name": "extraction", "schema": _EXTRACT, "instances": _EXTRACTS},
    {"name": "calendar_event", "schema": _EVENT, "instances": _EVENTS},
]
