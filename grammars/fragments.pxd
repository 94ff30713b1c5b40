# When `grammars/fragments.py` is compiled (see `grammars.native`), these declarations make
# `FragmentBuilder` (the base of `grammars.nfa.NFA`) a C extension type whose building columns
# and tables are C struct slots: the construction methods read them without a dictionary
# lookup. Everything else an NFA holds stays in its `__dict__`. The .py source stays plain Python.

cdef class FragmentBuilder:
    cdef dict __dict__
    cdef public Py_ssize_t _count
    cdef public list _eps_src, _eps_dst, _byte_src, _byte_mask, _byte_dst
    cdef public list _call_src, _call_rule, _call_dst, _call_op, _call_to, _call_lo, _call_hi
    cdef public dict _mask_id, _frags, _labels, _tries, _subs, _null_memo, _free_memo, rule_index, _lazy_rule_of
    cdef public list _frag_nodes, _pending, origins, rule_start, rule_end, rule_names, _built_labels, _built_tries
    cdef public set _entries
    cdef public object _lazy, _home, _owner, _dead, _in_body, _no_subs

    cpdef Py_ssize_t _new(self) except -1
    cpdef _eps(self, Py_ssize_t a, Py_ssize_t b)
    cpdef Py_ssize_t _mask_index(self, object mask) except -1
    cpdef Py_ssize_t _byte(self, Py_ssize_t s, object mask) except -1
    cpdef _build(self, node, s)
    cpdef _build_node(self, node, s)
    cpdef _build_seq(self, items, at, stop, s)
    cpdef _copy(self, frag, s)
    cpdef _subroutine(self, node, frag, s)
    cpdef _build_alt(self, branches, s, t)
    cpdef _build_prefixes(self, leaves, s)
    cpdef _build_repeat(self, node, s)
    cpdef _counter_loop(self, node, s)
    cpdef _byte_repeat(self, mask, lo, hi, s)
