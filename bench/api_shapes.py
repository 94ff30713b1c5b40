"""Realistic API-shaped schemas for the benchmark corpus (valid and invalid instances).

Shapes people actually constrain LLM output to: function/tool calls, nested
records, enums, arrays of objects, recursive trees, string formats and
numeric bounds. `python -m bench corpus --build` writes them, with the
converted `tests/schema_corpus.py`, to `bench/corpus/` (one file per schema);
the oracle in `bench.oracle` checks every `valid` flag on the way.

Example:
    >>> names = [s["name"] for s in SHAPES]
    >>> len(names) == len(set(names)) and all(s["valid"] and s["invalid"] for s in SHAPES)
    True
"""

from __future__ import annotations

from typing import Any

__all__ = ["SHAPES"]


def shape(name: str, schema: Any, valid: list, invalid: list) -> dict:
    return {"name": name, "schema": schema, "valid": valid, "invalid": invalid}


_WEATHER_ARGS = {"type": "object", "properties": {
    "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["location", "unit"], "additionalProperties": False}
_SEARCH_ARGS = {"type": "object", "properties": {
    "query": {"type": "string", "minLength": 1, "maxLength": 200},
    "max_results": {"type": "integer", "minimum": 1, "maximum": 50}},
    "required": ["query"], "additionalProperties": False}

_ADDRESS = {"type": "object", "properties": {
    "street": {"type": "string"}, "city": {"type": "string"},
    "zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"},
    "country": {"type": "string", "enum": ["US", "CA", "MX"]}},
    "required": ["street", "city", "country"], "additionalProperties": False}

SHAPES: list[dict] = [
    shape("api_tool_call_weather", {
        "type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": _WEATHER_ARGS},
        "required": ["name", "arguments"], "additionalProperties": False},
        [{"name": "get_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}},
         {"name": "get_weather", "arguments": {"location": "Zürich", "unit": "fahrenheit", "days": 14}}],
        [{"name": "get_weather", "arguments": {"location": "Paris", "unit": "kelvin"}},
         {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius", "days": 0}},
         {"name": "get_time", "arguments": {"location": "Paris", "unit": "celsius"}},
         {"name": "get_weather", "arguments": {"location": "Paris"}}]),
    shape("api_tool_choice", {
        "oneOf": [
            {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": _WEATHER_ARGS},
             "required": ["name", "arguments"], "additionalProperties": False},
            {"type": "object", "properties": {"name": {"const": "web_search"}, "arguments": _SEARCH_ARGS},
             "required": ["name", "arguments"], "additionalProperties": False}]},
        [{"name": "web_search", "arguments": {"query": "mlx structured generation", "max_results": 5}},
         {"name": "get_weather", "arguments": {"location": "Oslo", "unit": "celsius", "days": 3}}],
        [{"name": "web_search", "arguments": {"query": ""}},
         {"name": "web_search", "arguments": {"location": "Oslo", "unit": "celsius"}},
         {"name": "get_weather", "arguments": {"query": "x"}}]),
    shape("api_tool_calls_array", {
        "type": "array", "minItems": 1, "maxItems": 4, "items": {
            "type": "object", "properties": {
                "id": {"type": "string", "pattern": "^call_[A-Za-z0-9]{8}$"},
                "type": {"const": "function"},
                "function": {"type": "object", "properties": {
                    "name": {"type": "string", "enum": ["get_weather", "web_search", "send_email"]},
                    "arguments": {"type": "string"}}, "required": ["name", "arguments"],
                    "additionalProperties": False}},
            "required": ["id", "type", "function"], "additionalProperties": False}},
        [[{"id": "call_Ab3dE6gH", "type": "function",
           "function": {"name": "get_weather", "arguments": "{\"location\": \"Rome\"}"}}],
         [{"id": "call_00000000", "type": "function", "function": {"name": "web_search", "arguments": "{}"}},
          {"id": "call_zzzzzzzz", "type": "function", "function": {"name": "send_email", "arguments": ""}}]],
        [[], [{"id": "call_123", "type": "function", "function": {"name": "web_search", "arguments": "{}"}}],
         [{"id": "call_Ab3dE6gH", "type": "tool", "function": {"name": "web_search", "arguments": "{}"}}]]),
    shape("api_order", {
        "type": "object", "properties": {
            "order_id": {"type": "string", "format": "uuid"},
            "created": {"type": "string", "format": "date-time"},
            "customer": {"type": "object", "properties": {
                "name": {"type": "string", "minLength": 1}, "email": {"type": "string", "format": "email"},
                "shipping": _ADDRESS}, "required": ["name", "email"], "additionalProperties": False},
            "items": {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {
                "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
                "unit_price": {"type": "number", "minimum": 0}},
                "required": ["sku", "quantity", "unit_price"], "additionalProperties": False}},
            "status": {"type": "string", "enum": ["pending", "paid", "shipped", "cancelled"]}},
        "required": ["order_id", "customer", "items", "status"], "additionalProperties": False},
        [{"order_id": "123e4567-e89b-12d3-a456-426614174000", "created": "2024-05-01T12:30:00Z",
          "customer": {"name": "Ada Lovelace", "email": "ada@example.com",
                       "shipping": {"street": "1 Main St", "city": "Springfield", "zip": "12345", "country": "US"}},
          "items": [{"sku": "ABC-1234", "quantity": 2, "unit_price": 9.99},
                    {"sku": "XYZ-0001", "quantity": 1, "unit_price": 120}], "status": "paid"},
         {"order_id": "00000000-0000-0000-0000-000000000000",
          "customer": {"name": "B", "email": "b@c.io"},
          "items": [{"sku": "QQQ-9999", "quantity": 99, "unit_price": 0}], "status": "pending"}],
        [{"order_id": "not-a-uuid", "customer": {"name": "A", "email": "a@b.co"},
          "items": [{"sku": "ABC-1234", "quantity": 1, "unit_price": 1}], "status": "paid"},
         {"order_id": "123e4567-e89b-12d3-a456-426614174000", "customer": {"name": "A", "email": "a@b.co"},
          "items": [], "status": "paid"},
         {"order_id": "123e4567-e89b-12d3-a456-426614174000", "customer": {"name": "A", "email": "a@b.co"},
          "items": [{"sku": "ABC-1234", "quantity": 100, "unit_price": 1}], "status": "paid"},
         {"order_id": "123e4567-e89b-12d3-a456-426614174000", "customer": {"name": "A", "email": "a@b.co"},
          "items": [{"sku": "ABC-1234", "quantity": 1, "unit_price": 1}], "status": "lost"}]),
    shape("api_user_profile", {
        "type": "object", "properties": {
            "username": {"type": "string", "pattern": "^[a-z][a-z0-9_]{2,15}$"},
            "age": {"type": "integer", "minimum": 13, "maximum": 130},
            "website": {"type": "string", "format": "uri"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 5},
            "settings": {"type": "object", "properties": {
                "theme": {"enum": ["light", "dark", "system"]}, "notifications": {"type": "boolean"}},
                "additionalProperties": False}},
        "required": ["username", "age"], "additionalProperties": False},
        [{"username": "ada_99", "age": 36, "website": "https://example.org/~ada", "tags": ["math", "engines"],
          "settings": {"theme": "dark", "notifications": False}},
         {"username": "bob", "age": 130}],
        [{"username": "Bob", "age": 30}, {"username": "bob", "age": 12},
         {"username": "bob", "age": 30, "tags": ["a", "b", "c", "d", "e", "f"]},
         {"username": "bob", "age": 30, "settings": {"theme": "blue"}}]),
    shape("api_enum_classification", {
        "type": "object", "properties": {
            "sentiment": {"enum": ["positive", "negative", "neutral", "mixed"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "topics": {"type": "array", "items": {"enum": ["billing", "shipping", "product", "support", "other"]},
                       "minItems": 1, "maxItems": 3}},
        "required": ["sentiment", "confidence", "topics"], "additionalProperties": False},
        [{"sentiment": "positive", "confidence": 0.93, "topics": ["product"]},
         {"sentiment": "mixed", "confidence": 1, "topics": ["billing", "support", "other"]}],
        [{"sentiment": "angry", "confidence": 0.5, "topics": ["product"]},
         {"sentiment": "neutral", "confidence": 1.5, "topics": ["product"]},
         {"sentiment": "neutral", "confidence": 0.5, "topics": []}]),
    shape("api_file_tree", {
        "$defs": {"entry": {"type": "object", "properties": {
            "name": {"type": "string", "minLength": 1},
            "kind": {"enum": ["file", "dir"]},
            "size": {"type": "integer", "minimum": 0},
            "children": {"type": "array", "items": {"$ref": "#/$defs/entry"}}},
            "required": ["name", "kind"], "additionalProperties": False}},
        "$ref": "#/$defs/entry"},
        [{"name": "src", "kind": "dir", "children": [
            {"name": "main.py", "kind": "file", "size": 1024},
            {"name": "lib", "kind": "dir", "children": [{"name": "util.py", "kind": "file", "size": 0}]}]},
         {"name": "README.md", "kind": "file", "size": 12}],
        [{"name": "src", "kind": "folder"}, {"name": "", "kind": "file"},
         {"name": "src", "kind": "dir", "children": [{"name": "a", "kind": "file", "size": -1}]}]),
    shape("api_json_rpc", {
        "type": "object", "properties": {
            "jsonrpc": {"const": "2.0"}, "method": {"type": "string", "pattern": "^[a-z]+(\\.[a-z]+)*$"},
            "params": {"type": "array", "items": {"type": ["string", "number", "boolean", "null"]}},
            "id": {"type": ["integer", "string"]}},
        "required": ["jsonrpc", "method", "id"], "additionalProperties": False},
        [{"jsonrpc": "2.0", "method": "eth.balance", "params": ["0xabc", "latest"], "id": 1},
         {"jsonrpc": "2.0", "method": "ping", "params": [1.5, True, None], "id": "req-7"}],
        [{"jsonrpc": "1.0", "method": "ping", "id": 1}, {"jsonrpc": "2.0", "method": "Ping", "id": 1},
         {"jsonrpc": "2.0", "method": "ping", "id": 1.5}, {"jsonrpc": "2.0", "method": "ping", "params": [[1]], "id": 1}]),
    shape("api_event", {
        "type": "object", "properties": {
            "title": {"type": "string", "maxLength": 80},
            "start": {"type": "string", "format": "date-time"},
            "date": {"type": "string", "format": "date"},
            "duration": {"type": "string", "format": "duration"},
            "organizer": {"type": "string", "format": "email"},
            "host": {"type": "string", "format": "hostname"},
            "ip": {"type": "string", "format": "ipv4"}},
        "required": ["title", "start"], "additionalProperties": False},
        [{"title": "Standup", "start": "2024-06-03T09:00:00+02:00", "date": "2024-06-03", "duration": "PT15M",
          "organizer": "lead@team.example", "host": "meet.example.com", "ip": "10.0.0.12"},
         {"title": "Launch 🚀", "start": "2024-12-31T23:59:59.999Z"}],
        [{"title": "X", "start": "tomorrow"}, {"title": "X", "start": "2024-06-03T09:00:00Z", "date": "2024-02-30"},
         {"title": "X", "start": "2024-06-03T09:00:00Z", "ip": "300.1.1.1"},
         {"title": "X", "start": "2024-06-03T09:00:00Z", "organizer": "not an email"}]),
    shape("api_product_prices", {
        "type": "object", "properties": {
            "name": {"type": "string"},
            "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 10000},
            "discount_percent": {"type": "integer", "minimum": 0, "maximum": 90, "multipleOf": 5},
            "rating": {"type": "number", "minimum": 1, "maximum": 5},
            "stock": {"type": "integer", "minimum": 0}},
        "required": ["name", "price", "stock"], "additionalProperties": False},
        [{"name": "Widget", "price": 19.99, "discount_percent": 15, "rating": 4.5, "stock": 120},
         {"name": "Gadget", "price": 10000, "stock": 0}],
        [{"name": "W", "price": 0, "stock": 1}, {"name": "W", "price": 5, "discount_percent": 12, "stock": 1},
         {"name": "W", "price": 5, "rating": 5.5, "stock": 1}, {"name": "W", "price": 5, "stock": -3}]),
    shape("api_extraction_people", {
        "type": "object", "properties": {"people": {"type": "array", "items": {
            "type": "object", "properties": {
                "name": {"type": "string"}, "role": {"type": ["string", "null"]},
                "born": {"type": ["integer", "null"], "minimum": 1800, "maximum": 2025},
                "address": {"anyOf": [_ADDRESS, {"type": "null"}]}},
            "required": ["name", "role", "born", "address"], "additionalProperties": False}}},
        "required": ["people"], "additionalProperties": False},
        [{"people": [{"name": "Grace Hopper", "role": "rear admiral", "born": 1906, "address": None},
                     {"name": "John Doe", "role": None, "born": None,
                      "address": {"street": "5 Elm", "city": "Toronto", "country": "CA"}}]},
         {"people": []}],
        [{"people": [{"name": "X", "role": None, "born": 1700, "address": None}]},
         {"people": [{"name": "X", "role": None, "born": 1900}]},
         {"people": [{"name": "X", "role": None, "born": 1900, "address": {"street": "a", "city": "b", "country": "FR"}}]}]),
    shape("api_chat_message", {
        "type": "object", "properties": {
            "role": {"enum": ["system", "user", "assistant", "tool"]},
            "content": {"type": "string"},
            "tool_calls": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "arguments": {"type": "object"}},
                "required": ["name", "arguments"]}}},
        "required": ["role", "content"]},
        [{"role": "assistant", "content": "", "tool_calls": [{"name": "lookup", "arguments": {"id": 42, "deep": [1, {"x": None}]}}]},
         {"role": "user", "content": "Hi! \"quoted\" \\ and\nnew line"}],
        [{"role": "bot", "content": "hi"}, {"role": "user"},
         {"role": "assistant", "content": "x", "tool_calls": [{"name": "lookup", "arguments": []}]}]),
    shape("api_kv_config", {
        "type": "object", "properties": {
            "version": {"type": "integer", "const": 2},
            "env": {"type": "object", "patternProperties": {"^[A-Z_][A-Z0-9_]*$": {"type": "string"}},
                    "additionalProperties": False},
            "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
            "ports": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 65535}, "maxItems": 8}},
        "required": ["version", "env"], "additionalProperties": False},
        [{"version": 2, "env": {"PATH": "/usr/bin", "DEBUG_LEVEL": "3"}, "replicas": 3, "ports": [80, 443]},
         {"version": 2, "env": {}}],
        [{"version": 3, "env": {}}, {"version": 2, "env": {"path": "/usr/bin"}},
         {"version": 2, "env": {}, "ports": [0]}, {"version": 2, "env": {"A": 1}}]),
    shape("api_math_expression", {
        "$defs": {"expr": {"anyOf": [
            {"type": "number"},
            {"type": "object", "properties": {"op": {"enum": ["+", "-", "*", "/"]},
                                              "args": {"type": "array", "items": {"$ref": "#/$defs/expr"},
                                                       "minItems": 2, "maxItems": 2}},
             "required": ["op", "args"], "additionalProperties": False}]}},
        "$ref": "#/$defs/expr"},
        [{"op": "+", "args": [1, {"op": "*", "args": [2.5, -3]}]}, 42],
        [{"op": "^", "args": [1, 2]}, {"op": "+", "args": [1]}, {"op": "+", "args": [1, "2"]}]),
]
