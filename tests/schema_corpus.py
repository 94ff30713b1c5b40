"""A corpus of JSON schemas with hand-picked valid and invalid instances.

Loadable by tests and benchmarks: `CORPUS` is a list of dicts
`{"name", "schema", "valid": [...], "invalid": [...], "options": {...}}`.
`jsonschema` is the oracle: tests check every `valid` instance validates and
every `invalid` one does not, before comparing with the grammar. Entries with
`"hypothesis": False` are skipped by the generic generative test
(hypothesis-jsonschema cannot draw from them: recursive `$ref`s, `false`).

Example:
    >>> names = [c["name"] for c in CORPUS]
    >>> len(names) == len(set(names)) and len(names) >= 40
    True
"""

from __future__ import annotations

from typing import Any

__all__ = ["CORPUS", "BY_NAME"]

D7 = "http://json-schema.org/draft-07/schema#"


def case(name: str, schema: Any, valid: list, invalid: list, **extra: Any) -> dict:
    return {"name": name, "schema": schema, "valid": valid, "invalid": invalid, "options": {}, **extra}


CORPUS: list[dict] = [
    # -- scalars and types -------------------------------------------------------
    case("null", {"type": "null"}, [None], [0, False, "null", []]),
    case("boolean", {"type": "boolean"}, [True, False], [0, 1, "true", None]),
    case("string_plain", {"type": "string"}, ["", "héllo", "tab\there", "quote\"back\\slash", "😀", "\x00\x1f"],
         [1, None, ["a"]]),
    case("integer_plain", {"type": "integer"}, [0, -1, 12345678901234567890], [1.5, "1", True, None]),
    case("number_plain", {"type": "number"}, [0, -0.5, 1e-7, 3.14, 1e+300, -12], ["1", None, True]),
    case("type_list", {"type": ["string", "null"]}, ["x", None], [1, True, {}]),
    case("any_true", True, [None, 1, "x", [1, [2, {"a": None}]], {"k": {"j": []}}], []),
    case("any_empty", {"description": "anything"}, [False, 0.5, {"a": [None]}], []),
    case("nothing", False, [], [None, 1, "x"], hypothesis=False),
    # -- numbers -----------------------------------------------------------------
    case("int_range", {"type": "integer", "minimum": -17, "maximum": 12345},
         [-17, 0, 9, 10, 12345, 999], [-18, 12346, 100000, 3.5]),
    case("int_exclusive", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100},
         [1, 50, 99], [0, 100, -3]),
    case("int_multiple", {"type": "integer", "multipleOf": 5, "minimum": 0}, [0, 5, 1000, 123455],
         [3, -5, 12]),
    case("int_multiple_3_bounded", {"type": "integer", "multipleOf": 3, "minimum": -30, "maximum": 30},
         [-30, 0, 27], [-31, 31, 1, 33]),
    case("number_bounds", {"type": "number", "minimum": 0.5, "maximum": 100},
         [0.5, 1, 99.99, 100, 3.25], [0.49, 100.01, -1, 0]),
    case("number_exclusive", {"type": "number", "exclusiveMinimum": -1.25, "exclusiveMaximum": 3.5},
         [-1.2, 0, 3.49, 1e-5], [-1.25, 3.5, 4, -2]),
    case("number_cents", {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 1000},
         [0, 0.01, 19.99, 1000, 0.07], [0.001, -0.01, 1000.01], options={"numbers": "exact"}),
    # by default multipleOf is checked as validators do, in floating point: 0.07 / 0.01 = 7.000000000000001
    case("number_cents_double", {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 3},
         [0, 0.01, 0.5, 2.02, 3], [0.07, 2.01, 0.001, 3.01, -0.01]),
    case("draft7_exclusive_bool", {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number",
                                   "minimum": 0, "exclusiveMinimum": True}, [0.1, 5], [0, -1], hypothesis=False),
    # -- strings -----------------------------------------------------------------
    case("string_length", {"type": "string", "minLength": 2, "maxLength": 5},
         ["ab", "abcde", "é😀", "\n\n"], ["a", "abcdef", ""]),
    case("pattern_anchored", {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"},
         ["ABC-1234"], ["abc-1234", "ABC-123", "xABC-1234"]),
    case("pattern_search", {"type": "string", "pattern": "[0-9]"}, ["a1", "9", "x9y"], ["abc", ""]),
    case("pattern_and_length", {"type": "string", "pattern": "^[a-z]+$", "minLength": 3, "maxLength": 8},
         ["abc", "abcdefgh"], ["ab", "abcdefghi", "ABC"]),
    case("pattern_search_length", {"type": "string", "pattern": "@", "maxLength": 6},
         ["a@b", "@", "abcde@"], ["abc", "abcdef@"]),
    case("format_date", {"type": "string", "format": "date"}, ["2024-02-29", "1999-12-31"],
         ["2023-02-29", "2024-13-01", "24-01-01"]),
    case("format_datetime", {"type": "string", "format": "date-time"},
         ["2024-01-31T23:59:59Z", "2024-01-31T00:00:00.123+05:30"], ["2024-01-31 23:59:59Z", "2024-01-31T24:00:00Z"]),
    case("format_time", {"type": "string", "format": "time"}, ["12:00:00Z", "23:59:59.5-01:00"], ["12:00", "25:00:00Z"]),
    case("format_ipv4", {"type": "string", "format": "ipv4"}, ["192.168.0.1", "0.0.0.0"], ["256.1.1.1", "01.1.1.1"]),
    case("format_ipv6", {"type": "string", "format": "ipv6"}, ["::1", "fe80::1:2", "::ffff:1.2.3.4"],
         ["1::2::3", "12345::"]),
    case("format_uuid", {"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000"],
         ["123e4567e89b12d3a456426614174000", "xyz"]),
    case("format_hostname", {"type": "string", "format": "hostname"}, ["example.com", "a-b.c0", "localhost"],
         ["-a.com", "a..b", "a_b.com", "x" * 64 + ".com"], hypothesis=False),  # a documented subset
    case("format_uri", {"type": "string", "format": "uri"},
         ["https://example.com/a?b=c#d", "mailto:a@b.c", "urn:isbn:0451450523", "http://[::1]:80/"],
         ["no scheme", "http://exa mple.com", "1http://x"], hypothesis=False),
    case("format_duration", {"type": "string", "format": "duration"}, ["P1Y2M3DT4H5M6S", "PT5M", "P3W"],
         ["P", "PT", "1Y", "P1H"], hypothesis=False),
    case("format_email", {"type": "string", "format": "email"}, ["a.b@example.com"], ["no-at-sign"]),
    # -- enum / const --------------------------------------------------------------
    case("enum_strings", {"enum": ["red", "green", "blue", "é"]}, ["red", "é"], ["Red", "yellow", 1]),
    case("enum_mixed", {"enum": [1, "1", None, True, [1, 2], {"a": 1, "b": [2]}]},
         [1, "1", None, True, [1, 2], {"b": [2], "a": 1}], [2, "2", False, [2, 1], {"a": 1}]),
    case("const_number", {"const": 1}, [1, 1.0], [2, "1", True]),
    case("const_object", {"const": {"x": 1, "y": "z"}}, [{"x": 1, "y": "z"}, {"y": "z", "x": 1}],
         [{"x": 1}, {"x": 1, "y": "z", "w": 0}]),
    case("enum_with_type", {"type": "string", "enum": ["a", 1, "b"]}, ["a", "b"], [1, "c"]),
    # -- objects -------------------------------------------------------------------
    case("if_then_else_discriminator", {
        "type": "object", "properties": {"mode": {"enum": ["search", "extract"]}, "pattern": {"type": "string"},
                                         "dest": {"type": "string"}},
        "required": ["mode"], "additionalProperties": False,
        "if": {"properties": {"mode": {"const": "extract"}}, "required": ["mode"]},
        "then": {"required": ["dest"]}, "else": {"required": ["pattern"]}},
         [{"mode": "extract", "dest": "x"}, {"mode": "search", "pattern": "p"},
          {"mode": "extract", "pattern": "p", "dest": "d"}, {"mode": "search", "pattern": "p", "dest": "d"}],
         [{"mode": "extract"}, {"mode": "search"}, {"mode": "search", "dest": "d"}, {"mode": "extract", "pattern": "p"}]),
    case("if_type_then_else", {"if": {"type": "string"}, "then": {"maxLength": 3}, "else": {"type": "integer"}},
         ["abc", "", 3, -7], ["abcd", 1.5, None, [1]]),
    case("not_required_together", {"type": "object", "properties": {"cmd": {"type": "string"}, "args": {"type": "array"}},
                                   "not": {"allOf": [{"required": ["cmd"]}, {"required": ["args"]}]}},
         [{}, {"cmd": "x"}, {"args": []}, {"other": 1}], [{"cmd": "x", "args": []}, {"cmd": "x", "args": [], "z": 1}]),
    case("not_not", {"not": {"not": {"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"]}}},
         [{"a": 1}, {"a": 1, "b": 2}], [{"a": 2}, {}, 1, "a"], hypothesis=False),   # it draws nothing from `not`
    case("dependent_required", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                                                 "c": {"type": "string"}},
                                "dependentRequired": {"a": ["b"], "c": ["a"]}},
         [{}, {"b": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2, "c": "x"}, {"b": 1, "d": None}],
         [{"a": 1}, {"b": 1, "c": "x"}, {"a": 1, "c": "x"}, {"c": "x"}]),
    case("draft7_dependencies", {"$schema": D7, "type": "object",
                                 "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}, "z": {"type": "boolean"}},
                                 "dependencies": {"x": {"properties": {"y": {"not": {}}}}, "z": ["x"]}},
         [{}, {"x": 1}, {"y": 2}, {"x": 1, "z": True}],
         [{"x": 1, "y": 2}, {"z": True}, {"y": 1, "z": False}]),
    case("dependency_on_an_undeclared_name", {"type": "object", "properties": {"shape": {"enum": ["sq", "circle"]}},
                                              "additionalProperties": {"type": "number"},
                                              "dependentRequired": {"shape": ["size"]}},
         [{"shape": "sq", "size": 2}, {"size": 3}, {}, {"size": 1, "w": 2}, {"shape": "circle", "size": 1, "r": 2}],
         [{"shape": "sq"}, {"shape": "sq", "size": "big"}, {"shape": "sq", "w": 1}]),
    case("object_required", {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                             "required": ["name"]},
         [{"name": "x"}, {"name": "x", "age": 3}, {"name": "x", "extra": [1]}], [{"age": 3}, {"name": 1}, []]),
    case("object_closed", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
                           "additionalProperties": False},
         [{}, {"a": 1}, {"b": True}, {"a": 1, "b": False}], [{"c": 1}, {"a": "x"}]),
    case("object_strict_option", {"type": "object", "properties": {"a": {"type": "integer"}}},
         [{}, {"a": 1}], [{"a": 1, "b": 2}, {"b": 2}], options={"strict": True}, hypothesis=False),
    case("object_additional_schema", {"type": "object", "additionalProperties": {"type": "integer"}},
         [{}, {"x": 1, "y": 2}], [{"x": "1"}, {"x": 1.5}]),
    case("object_counts", {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "minProperties": 1,
                           "maxProperties": 2, "additionalProperties": {"type": "null"}},
         [{"a": 1}, {"a": 1, "c": 2}, {"z": None}], [{}, {"a": 1, "b": 2, "c": 3}, {"a": 1, "y": None, "z": None}]),
    case("pattern_properties", {"type": "object", "patternProperties": {"^x-": {"type": "string"}},
                                "additionalProperties": False},
         [{}, {"x-a": "1", "x-b": ""}], [{"y": "1"}, {"x-a": 1}]),
    case("property_names", {"type": "object", "propertyNames": {"maxLength": 3}, "additionalProperties": {"type": "integer"}},
         [{}, {"abc": 1}], [{"abcd": 1}, {"a": "x"}]),
    case("nested_objects", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1},
                                                  "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
                 "required": ["id"], "additionalProperties": False}},
        "required": ["user"], "additionalProperties": False},
        [{"user": {"id": 1}}, {"user": {"id": 2, "tags": ["a", "b"]}}],
        [{"user": {}}, {"user": {"id": 0}}, {"user": {"id": 1, "tags": ["a", "b", "c", "d"]}}, {}]),
    # -- arrays --------------------------------------------------------------------
    case("array_items", {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4},
         [[1], [1, 2, 3, 4]], [[], [1, 2, 3, 4, 5], ["a"]]),
    case("array_prefix", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
         [[], ["a"], ["a", 1]], [["a", 1, 2], [1], ["a", "b"]]),
    case("array_prefix_rest", {"type": "array", "prefixItems": [{"const": "head"}], "items": {"type": "number"},
                               "minItems": 2},
         [["head", 1], ["head", 1, 2.5]], [["head"], ["tail", 1], ["head", "x"]]),
    case("draft7_tuple", {"$schema": D7, "type": "array", "items": [{"type": "integer"}, {"type": "string"}],
                          "additionalItems": False},
         [[], [1], [1, "a"]], [[1, "a", 2], ["a"]]),
    case("draft7_additional_items", {"$schema": D7, "type": "array", "items": [{"type": "integer"}],
                                     "additionalItems": {"type": "boolean"}},
         [[1], [1, True, False]], [[1, 2], [True]]),
    # -- combinators ---------------------------------------------------------------
    case("anyOf_types", {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer", "minimum": 10}]},
         ["", "ab", 10, 99], ["abc", 9, None]),
    case("oneOf_discriminated", {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
         "required": ["kind"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
         "required": ["kind"], "additionalProperties": False}]},
        [{"kind": "cat", "lives": 9}, {"kind": "dog"}], [{"kind": "cow"}, {"kind": "cat", "good": True}, {}]),
    # overlapping branches: each holds with the others' negations (exactly one)
    case("oneOf_overlapping_required", {"oneOf": [{"type": "object", "required": ["a"]},
                                                  {"type": "object", "required": ["b"]}]},
         [{"a": 1}, {"b": None}, {"a": 1, "c": 2}], [{"a": 1, "b": 2}, {}, {"c": 1}, 5]),
    case("oneOf_string_or_enum", {"oneOf": [{"type": "string"}, {"enum": ["a", "b", 1]}]},
         ["c", "", 1], ["a", "b", 2, None]),
    case("oneOf_overlapping_properties", {"type": "object", "oneOf": [
        {"properties": {"kind": {"enum": ["x", "y"]}}, "required": ["kind"]},
        {"properties": {"kind": {"enum": ["y", "z"]}, "size": {"type": "string"}}, "required": ["kind", "size"]},
        {"properties": {"flag": {"type": "boolean"}}, "required": ["flag"]}]},
         [{"kind": "x"}, {"kind": "z", "size": "1"}, {"kind": "y"}, {"flag": True}, {"kind": "y", "size": 2}],
         [{"kind": "x", "size": "1", "flag": True}, {"kind": "y", "size": "2"}, {}, {"kind": "x", "flag": False}]),
    case("allOf_merge", {"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"properties": {"a": {"minimum": 0}, "b": {"type": "string"}}, "required": ["b"]}]},
        [{"a": 0, "b": ""}, {"a": 5, "b": "x", "c": None}], [{"a": -1, "b": ""}, {"a": 1}, {"b": "x"}]),
    case("allOf_closed", {"allOf": [{"properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                                    {"properties": {"b": {"type": "integer"}}}], "type": "object"},
         [{}, {"a": 1}], [{"b": 1}, {"a": 1, "b": 2}]),
    case("not_types", {"not": {"type": ["string", "null"]}}, [1, True, [], {}], ["x", None]),
    case("not_enum", {"type": "string", "not": {"enum": ["admin", "root"]}}, ["user", "", "adm"],
         ["admin", "root"]),
    case("not_number_values", {"type": "integer", "minimum": 0, "maximum": 10, "not": {"const": 5}},
         [0, 4, 6, 10], [5, 11]),
    # -- references ----------------------------------------------------------------
    case("ref_defs", {"$defs": {"pos": {"type": "integer", "minimum": 1}},
                      "type": "object", "properties": {"x": {"$ref": "#/$defs/pos"}, "y": {"$ref": "#/$defs/pos"}},
                      "additionalProperties": False},
         [{"x": 1, "y": 2}], [{"x": 0}, {"y": "1"}]),
    case("ref_pointer_escapes", {"definitions": {"a/b": {"type": "string"}, "c~d": {"type": "integer"}},
                                 "type": "array", "prefixItems": [{"$ref": "#/definitions/a~1b"},
                                                                  {"$ref": "#/definitions/c~0d"}], "items": False},
         [["s", 1]], [[1, "s"]]),
    case("ref_anchor", {"$defs": {"x": {"$anchor": "name", "type": "string", "minLength": 1}},
                        "type": "object", "properties": {"n": {"$ref": "#name"}}, "required": ["n"]},
         [{"n": "a"}], [{"n": ""}, {}]),
    case("ref_embedded_id", {"$id": "https://example.com/root.json",
                             "$defs": {"item": {"$id": "item.json", "type": "integer", "minimum": 0},
                                       "name": {"$id": "https://example.com/defs/name.json", "type": "string",
                                                "$defs": {"short": {"maxLength": 3}}}},
                             "type": "object", "properties": {"x": {"$ref": "item.json"},
                                                              "n": {"$ref": "defs/name.json#/$defs/short"}},
                             "additionalProperties": False},
         [{"x": 0, "n": "abc"}, {}], [{"x": -1}, {"n": "abcd"}, {"x": "0"}]),
    case("recursive_tree", {"$defs": {"node": {"type": "object", "properties": {
        "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["value"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
        [{"value": 1}, {"value": 1, "children": [{"value": 2, "children": [{"value": 3, "children": []}]}]}],
        [{"value": 1, "children": [{"val": 2}]}, {"children": []}], hypothesis=False),
    case("recursive_root", {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
                                                             "v": {"type": "string"}},
                            "required": ["v", "next"], "additionalProperties": False},
         [{"v": "a", "next": None}, {"v": "a", "next": {"v": "b", "next": None}}],
         [{"v": "a"}, {"v": "a", "next": {"v": 1, "next": None}}], hypothesis=False),
    case("linked_list_draft7", {"$schema": D7, "definitions": {"item": {"type": "object", "properties": {
        "id": {"type": "integer"}, "rest": {"$ref": "#/definitions/item"}}, "required": ["id"],
        "additionalProperties": False}}, "$ref": "#/definitions/item"},
        [{"id": 1}, {"id": 1, "rest": {"id": 2}}], [{"id": 1, "rest": {}}, {"id": "x"}], hypothesis=False),
    # -- realistic API shapes --------------------------------------------------------
    case("tool_call", {"type": "object", "properties": {
        "name": {"type": "string", "enum": ["get_weather", "search"]},
        "arguments": {"type": "object", "properties": {
            "location": {"type": "string", "minLength": 1},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14}},
            "required": ["location"], "additionalProperties": False}},
        "required": ["name", "arguments"], "additionalProperties": False},
        [{"name": "search", "arguments": {"location": "Paris"}},
         {"name": "get_weather", "arguments": {"location": "Oslo", "unit": "celsius", "days": 3}}],
        [{"name": "other", "arguments": {"location": "x"}}, {"name": "search", "arguments": {"location": ""}},
         {"name": "search", "arguments": {"location": "x", "days": 15}}]),
    case("array_of_objects", {"type": "array", "items": {"type": "object", "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z0-9]{4,8}$"}, "qty": {"type": "integer", "minimum": 1},
        "price": {"type": "number", "exclusiveMinimum": 0}}, "required": ["sku", "qty"],
        "additionalProperties": False}, "maxItems": 5},
        [[], [{"sku": "AB12", "qty": 1, "price": 9.99}]],
        [[{"sku": "ab", "qty": 1}], [{"sku": "ABCD", "qty": 0}], [{"sku": "ABCD", "qty": 1, "price": 0}]]),
    case("pydantic_like", {"$defs": {"Status": {"enum": ["active", "inactive"], "title": "Status", "type": "string"},
                                     "Address": {"properties": {"street": {"title": "Street", "type": "string"},
                                                                "zip": {"anyOf": [{"type": "string"}, {"type": "null"}],
                                                                        "default": None, "title": "Zip"}},
                                                 "required": ["street"], "title": "Address", "type": "object"}},
                           "properties": {"id": {"title": "Id", "type": "integer"},
                                          "status": {"$ref": "#/$defs/Status"},
                                          "addresses": {"items": {"$ref": "#/$defs/Address"}, "title": "Addresses",
                                                        "type": "array"}},
                           "required": ["id", "status", "addresses"], "title": "User", "type": "object"},
         [{"id": 1, "status": "active", "addresses": [{"street": "Main", "zip": None}]}],
         [{"id": 1, "status": "gone", "addresses": []}, {"id": 1, "status": "active", "addresses": [{"zip": "1"}]}]),
]

BY_NAME = {c["name"]: c for c in CORPUS}
