# When `grammars/json_schema.py` is compiled (see `grammars.native`), these declarations make
# `Compiler` a C extension type whose tables are C struct slots (read without a dictionary
# lookup in its own methods); anything else stays in its `__dict__`. The .py source stays plain Python.

cdef class Compiler:
    cdef dict __dict__
    cdef public object root, ws, strict, numbers, value, any_order, approximate, draft, resolver, merger, budget
    cdef public dict rules, _rule_of, _inline, pattern_bodies, string_bodies, matchers, _acceptors, labels, tries
    cdef public set _stack
    cdef public Py_ssize_t _depth
    cdef public list empty, notes
