# When `grammars/ast.py` is compiled (see `grammars.native`), these declarations
# give its node classes (C extension types there: `cython.cclass`) their fields as
# C struct slots. The .py source stays plain Python.

cdef extern from "Python.h":
    # safe on any object (a no-op when untracked); used on the item tuples of `Seq` and `Alt`,
    # which hold nodes only, themselves untracked (see ast.py)
    void PyObject_GC_UnTrack(object)


cdef class ByteSet:
    cdef readonly object mask


cdef class Seq:
    cdef readonly tuple items
    cdef Py_hash_t _hash


cdef class Alt:
    cdef readonly tuple items
    cdef Py_hash_t _hash


cdef class Repeat:
    cdef readonly object item
    cdef readonly object min
    cdef readonly object max
    cdef Py_hash_t _hash


cdef class Ref:
    cdef readonly str name


cdef class AnyOrder:
    cdef readonly tuple items, bans, needs
    cdef readonly object required, extra, sep, lo, hi
    cdef Py_hash_t _hash
