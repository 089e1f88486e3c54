// fastcall.cpp: the binding's single-state call in one C step (compiler/fastcall.py builds it).
//
// Why: from Python, the checks, conversions and result objects of a ctypes call cost more
// than the barrier itself (bicycle: ~0.3 us of C inside ~1.6 us of binding). Here one call
// checks the arrays with numpy's own macros, hands their memory to the library's float64
// entry (cbf_lie_f64 / cbf_lie2_f64, the same C function ctypes would call, so the same bits)
// and builds the result tuple.
//
// An Entry is called with the arrays only. It takes the fast path when every argument is an
// exact numpy.ndarray of native float64, aligned and C-contiguous, of shape (n,) or (n, m) as
// its place asks; anything else goes, unchanged, to the Python fallback it was made with, which
// converts or refuses with the binding's usual error. Non-finite inputs are the header's
// business, as on every path: it returns status 1 and NaN outputs.
//
// Thread safety: inputs are read, outputs written to this call's stack frame, and the entry
// keeps its workspace on its own stack, so the GIL is released around the C call as ctypes does.
// No heap memory besides the result objects, no state shared between calls.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <cstddef>
#include <cstdint>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

namespace {

constexpr int kMaxArrays = 5;             // lie2: x, f, G, Dff, DfG
constexpr Py_ssize_t kMaxOutputs = 4096;  // outputs on this frame: 3 + 2m doubles at most

using Lie = int (*)(const double*, const double*, const double*, double*);
using Lie2 = int (*)(const double*, const double*, const double*, const double*, const double*, double*);

struct Entry {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    void* fn;              // cbf_lie_f64 or cbf_lie2_f64
    int order;             // 1: (x, f, G) -> (h, Lf h, Lg h); 2: five arrays -> five results
    npy_intp n, m;
    PyObject* fallback;    // called with the same arguments when the fast path does not apply
    PyObject* owner;       // keeps the library (and so fn) loaded while this entry lives
};

// Whether `obj` is an exact ndarray of native, aligned, C-contiguous float64 with shape (n,)
// (cols == 0) or (n, cols).
inline bool fits(PyObject* obj, npy_intp n, npy_intp cols) {
    if (!PyArray_CheckExact(obj)) return false;
    PyArrayObject* a = reinterpret_cast<PyArrayObject*>(obj);
    const int want = cols ? 2 : 1;
    if (PyArray_TYPE(a) != NPY_DOUBLE || PyArray_NDIM(a) != want || !PyArray_ISNOTSWAPPED(a)) return false;
    if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)) return false;
    const npy_intp* dims = PyArray_DIMS(a);
    return dims[0] == n && (!cols || dims[1] == cols);
}

PyObject* vector(const double* values, npy_intp count) {
    PyObject* arr = PyArray_SimpleNew(1, &count, NPY_DOUBLE);
    if (arr) {
        double* dst = static_cast<double*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(arr)));
        for (npy_intp i = 0; i < count; ++i) dst[i] = values[i];
    }
    return arr;
}

PyObject* entry_call(PyObject* self_obj, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    Entry* self = reinterpret_cast<Entry*>(self_obj);
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const int arrays = self->order == 1 ? 3 : 5;
    bool fast = kwnames == nullptr && nargs == arrays;
    for (int i = 0; fast && i < arrays; ++i)
        fast = fits(args[i], self->n, (i == 2 || i == 4) ? self->m : 0);
    if (!fast) return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    const double* in[kMaxArrays];
    for (int i = 0; i < arrays; ++i)
        in[i] = static_cast<const double*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(args[i])));
    const npy_intp m = self->m;
    double out[kMaxOutputs];
    Py_BEGIN_ALLOW_THREADS
    if (self->order == 1)
        (void)reinterpret_cast<Lie>(self->fn)(in[0], in[1], in[2], out);
    else
        (void)reinterpret_cast<Lie2>(self->fn)(in[0], in[1], in[2], in[3], in[4], out);
    Py_END_ALLOW_THREADS
    PyObject* lg = vector(out + 2, m);
    if (!lg) return nullptr;
    if (self->order == 1) return Py_BuildValue("(ddN)", out[0], out[1], lg);
    PyObject* lglf = vector(out + 3 + m, m);
    if (!lglf) {
        Py_DECREF(lg);
        return nullptr;
    }
    return Py_BuildValue("(ddNdN)", out[0], out[1], lg, out[2 + m], lglf);
}

PyObject* entry_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
    static const char* keywords[] = {"address", "order", "n", "m", "fallback", "owner", nullptr};
    unsigned long long address = 0;
    int order = 0;
    Py_ssize_t n = 0, m = 0;
    PyObject *fallback = nullptr, *owner = nullptr;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KinnOO", const_cast<char**>(keywords), &address, &order,
                                     &n, &m, &fallback, &owner))
        return nullptr;
    if (address == 0 || (order != 1 && order != 2) || n < 1 || m < 0 || 3 + 2 * m > kMaxOutputs) {
        PyErr_SetString(PyExc_ValueError, "Entry: null address, order not 1 or 2, or n, m out of range");
        return nullptr;
    }
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "Entry: fallback must be callable");
        return nullptr;
    }
    Entry* self = reinterpret_cast<Entry*>(type->tp_alloc(type, 0));
    if (!self) return nullptr;
    self->vectorcall = entry_call;
    self->fn = reinterpret_cast<void*>(static_cast<uintptr_t>(address));
    self->order = order;
    self->n = n;
    self->m = m;
    Py_INCREF(fallback);
    Py_INCREF(owner);
    self->fallback = fallback;
    self->owner = owner;
    return reinterpret_cast<PyObject*>(self);
}

int entry_traverse(PyObject* self_obj, visitproc visit, void* arg) {
    Entry* self = reinterpret_cast<Entry*>(self_obj);
    Py_VISIT(self->fallback);
    Py_VISIT(self->owner);
    return 0;
}

int entry_clear(PyObject* self_obj) {
    Entry* self = reinterpret_cast<Entry*>(self_obj);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->owner);
    return 0;
}

void entry_dealloc(PyObject* self_obj) {
    PyTypeObject* type = Py_TYPE(self_obj);
    PyObject_GC_UnTrack(self_obj);
    entry_clear(self_obj);
    type->tp_free(self_obj);
    Py_DECREF(type);           // a heap type: every instance holds a reference to it
}

PyMemberDef entry_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Entry, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot entry_slots[] = {
    {Py_tp_doc, const_cast<char*>("Entry(address, order, n, m, fallback, owner): a barrier's single-state call")},
    {Py_tp_new, reinterpret_cast<void*>(entry_new)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_traverse, reinterpret_cast<void*>(entry_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(entry_clear)},
    {Py_tp_dealloc, reinterpret_cast<void*>(entry_dealloc)},
    {Py_tp_members, entry_members},
    {0, nullptr},
};

PyType_Spec entry_spec = {"_cbf_fastcall.Entry", sizeof(Entry), 0,
                          Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL, entry_slots};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cbf_fastcall",
                      "The compiled barrier binding's single-state call (compiler/fastcall.cpp).", -1,
                      nullptr, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__cbf_fastcall(void) {
    import_array();
    PyObject* mod = PyModule_Create(&module);
    if (!mod) return nullptr;
    PyObject* type = PyType_FromSpec(&entry_spec);
    PyObject* cap = PyLong_FromSsize_t(kMaxOutputs);    // the binding reads it: larger m use ctypes
    const bool ok = type && cap && PyObject_SetAttrString(type, "max_outputs", cap) == 0;
    Py_XDECREF(cap);
    if (!ok || PyModule_AddObject(mod, "Entry", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(mod);
        return nullptr;
    }
    return mod;
}
