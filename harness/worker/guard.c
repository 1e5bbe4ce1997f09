/* fp4bench's timed window, held where a submission's Python code cannot reach it.

The worker runs untrusted code in its own interpreter. Anything that decides a time and lives in a Python object,
frame or module global can be rewritten by that code (a frame walk, the garbage collector), and any Python callable
the submission plants (trace, profile and sys.monitoring hooks, signal handlers, gc callbacks, the unraisable hook,
audit hooks) can run between the end of the window and the moment the harness has its result. So the marks live
in C statics, the calls are made from C, and every such entry point is removed from C, where removing them runs no
bytecode and so fires no hook. harness/worker/native.py builds and loads this file and documents the API.

Built with the system C compiler against Python's headers only: the CUDA driver is opened with dlopen on first
use, its few functions declared here by hand with cuda.h's documented prototypes. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* ---- CUDA driver API (cuda.h): handles are pointers, CUresult an int, CUDA_SUCCESS 0 ---- */
typedef int CUresult;
typedef struct CUctx_st *CUcontext;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;

static struct {
    void *lib;
    CUresult (*ctx_get_current)(CUcontext *);
    CUresult (*event_create)(CUevent *, unsigned int);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_synchronize)(CUevent);
    CUresult (*event_elapsed_ms)(float *, CUevent, CUevent);
    CUresult (*get_error_name)(CUresult, const char **);
} cu;

enum { MARKS_NONE, MARKS_CPU, MARKS_CUDA };

/* ---- state: the window's marks and the baseline taken by arm(); nothing here is a Python attribute ---- */
static struct {
    int armed, in_run, marks;
    unsigned long thread;          /* the thread that armed: the only one allowed to call */
    struct timespec t_start, t_end;
    CUcontext ctx;
    CUevent ev_start, ev_end;
    int gc_was_enabled;
    Py_tracefunc trace_func, profile_func;
    PyObject *trace_obj, *profile_obj;
    PyObject *mon_register, *mon_get_tool, *mon_set_events, *mon_free_tool, *mon_events;
    int mon_in_use[6];             /* sys.monitoring tool ids 0-5 in use at arm() */
    PyObject *getsignal, *setsignal, *sig_dfl, *sig_numbers, *sig_names, *sig_handlers;
    struct sigaction sig_actions[NSIG];
    int timer_armed[3];            /* ITIMER_REAL, _VIRTUAL, _PROF armed at arm() */
    PyObject *gc_callbacks, *gc_callbacks_base, *unraisablehook;
    PyObject *notes;               /* what scrub found, for cleared() */
    PyObject *graveyard;           /* everything scrub removed or run_calls dropped: freed by release() */
    char *pending;                 /* read_line: bytes read past the last line */
    Py_ssize_t pending_len, pending_cap;
    int pending_fd;
} g = {.pending_fd = -1};

static int note(const char *fmt, ...) {
    va_list va;
    va_start(va, fmt);
    PyObject *s = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (s == NULL) return -1;
    int rc = PyList_Append(g.notes, s);
    Py_DECREF(s);
    return rc;
}

/* Keep a reference until release(): dropping the last one now could run a finalizer (submission code). */
static int bury(PyObject *obj) { return obj == NULL ? 0 : PyList_Append(g.graveyard, obj); }

/* A name for a planted callable that runs none of its code: a function's qualname, else its type's name. */
static const char *name_of(PyObject *obj) {
    static char buf[128];
    if (obj == NULL) return "C function";
    PyObject *fn = PyMethod_Check(obj) ? PyMethod_GET_FUNCTION(obj) : obj;
    if (PyFunction_Check(fn)) {
        PyObject *q = PyObject_GetAttrString(fn, "__qualname__");  /* a C getter on the exact function type */
        const char *s = (q != NULL && PyUnicode_Check(q)) ? PyUnicode_AsUTF8(q) : NULL;
        if (s != NULL) snprintf(buf, sizeof buf, "%s", s);
        Py_XDECREF(q);
        if (s != NULL) return buf;
        PyErr_Clear();
    }
    return Py_TYPE(obj)->tp_name;
}

static PyObject *call(PyObject *fn, const char *fmt, ...) {
    va_list va;
    va_start(va, fmt);
    PyObject *args = Py_VaBuildValue(fmt, va);
    va_end(va);
    if (args == NULL) return NULL;
    PyObject *r = PyObject_Call(fn, args, NULL);
    Py_DECREF(args);
    return r;
}

/* ---- scrub: every way for Python code to run at arbitrary points in this thread, back to the baseline ---- */
static int scrub_trace(void) {
    PyThreadState *ts = PyThreadState_Get();
    if (ts->c_tracefunc != g.trace_func || ts->c_traceobj != g.trace_obj) {
        if (note("sys.settrace hook (%s)", name_of(ts->c_traceobj)) < 0 || bury(ts->c_traceobj) < 0) return -1;
        PyEval_SetTrace(g.trace_func, g.trace_obj);
    }
    if (ts->c_profilefunc != g.profile_func || ts->c_profileobj != g.profile_obj) {
        if (note("sys.setprofile hook (%s)", name_of(ts->c_profileobj)) < 0 || bury(ts->c_profileobj) < 0) return -1;
        PyEval_SetProfile(g.profile_func, g.profile_obj);
    }
    return 0;
}

static int scrub_monitoring(void) {
    if (g.mon_register == NULL) return 0;  /* before 3.12 */
    for (int tool = 0; tool < 6; tool++) {
        if (g.mon_in_use[tool]) continue;
        int found = 0;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(g.mon_events); i++) {
            PyObject *old = call(g.mon_register, "iOO", tool, PyTuple_GET_ITEM(g.mon_events, i), Py_None);
            if (old == NULL) return -1;
            found |= old != Py_None;
            int rc = old != Py_None ? bury(old) : 0;
            Py_DECREF(old);
            if (rc < 0) return -1;
        }
        PyObject *name = call(g.mon_get_tool, "(i)", tool);
        if (name == NULL) return -1;
        if (name != Py_None) {  /* in use: no events, then free it (3.12's free_tool_id keeps the events) */
            PyObject *off = call(g.mon_set_events, "ii", tool, 0);
            PyObject *freed = off ? call(g.mon_free_tool, "(i)", tool) : NULL;
            Py_XDECREF(off);
            Py_XDECREF(freed);
            if (freed == NULL) { Py_DECREF(name); return -1; }
        }
        int rc = 0;
        if (found || name != Py_None) {
            const char *s = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
            if (s == NULL) PyErr_Clear();
            rc = note("sys.monitoring tool %d ('%s')", tool, s ? s : "unnamed");
        }
        Py_DECREF(name);
        if (rc < 0) return -1;
    }
    return 0;
}

static int scrub_signals(void) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(g.sig_numbers); i++) {
        PyObject *num = PyTuple_GET_ITEM(g.sig_numbers, i), *base = PyTuple_GET_ITEM(g.sig_handlers, i);
        PyObject *now = call(g.getsignal, "(O)", num);
        if (now == NULL) return -1;
        int planted = now != base && PyCallable_Check(now);
        int rc = planted ? note("signal handler for %U (%s)", PyTuple_GET_ITEM(g.sig_names, i), name_of(now)) : 0;
        if (rc == 0 && planted) rc = bury(now);
        Py_DECREF(now);
        if (rc < 0) return -1;
        if (!planted) continue;
        /* None: the baseline handler was not set from Python; clear Python's, then restore the C one */
        PyObject *old = call(g.setsignal, "OO", num, base == Py_None ? g.sig_dfl : base);
        if (old == NULL) return -1;
        Py_DECREF(old);
        int signum = (int)PyLong_AsLong(num);
        if (base == Py_None && sigaction(signum, &g.sig_actions[signum], NULL) != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
    }
    return 0;
}

/* A timer the submission armed would deliver its signal to a handler reset to the default: disarm it instead. */
static int scrub_timers(void) {
    static const char *names[3] = {"ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF"};
    static const int which[3] = {ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF};
    for (int i = 0; i < 3; i++) {
        struct itimerval now, off = {{0, 0}, {0, 0}};
        if (g.timer_armed[i] || getitimer(which[i], &now) != 0 || (now.it_value.tv_sec == 0 && now.it_value.tv_usec == 0))
            continue;
        if (setitimer(which[i], &off, NULL) != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (note("interval timer %s", names[i]) < 0) return -1;
    }
    return 0;
}

static int scrub_hooks(void) {
    Py_ssize_t n = PyList_GET_SIZE(g.gc_callbacks), nb = PyTuple_GET_SIZE(g.gc_callbacks_base);
    int changed = n != nb;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *cb = PyList_GET_ITEM(g.gc_callbacks, i);
        int known = 0;
        for (Py_ssize_t j = 0; j < nb; j++) known |= cb == PyTuple_GET_ITEM(g.gc_callbacks_base, j);
        if (!known && (note("gc callback (%s)", name_of(cb)) < 0 || bury(cb) < 0)) return -1;
        changed |= i >= nb || cb != PyTuple_GET_ITEM(g.gc_callbacks_base, i);
    }
    if (changed && PyList_SetSlice(g.gc_callbacks, 0, n, g.gc_callbacks_base) < 0) return -1;
    PyObject *hook = PySys_GetObject("unraisablehook");  /* borrowed */
    if (hook != g.unraisablehook) {
        if (note("sys.unraisablehook (%s)", hook ? name_of(hook) : "deleted") < 0 || bury(hook) < 0) return -1;
        if (PySys_SetObject("unraisablehook", g.unraisablehook) < 0) return -1;
    }
    return 0;
}

static int scrub_all(void) {
    /* the unraisable hook first: PyEval_SetTrace reports its own failures through it */
    if (scrub_hooks() < 0 || scrub_trace() < 0 || scrub_monitoring() < 0 || scrub_timers() < 0 ||
        scrub_signals() < 0)
        return -1;
    return 0;
}

/* Audit hooks cannot be removed, and clearing a trace hook raises an audit event, so none may be added after arm():
   a RuntimeError from an existing hook makes sys.addaudithook (and PySys_AddAuditHook) skip the new one. */
static int audit(const char *event, PyObject *args, void *data) {
    (void)args, (void)data;
    if (!g.armed || strcmp(event, "sys.addaudithook") != 0) return 0;
    note("sys.addaudithook refused");
    PyErr_SetString(PyExc_RuntimeError, "fp4bench: no audit hook may be added while the guard is armed");
    return -1;
}

/* ---- argument and caller checks ---- */
static int check_caller(const char *fn) {
    if (!g.armed) {
        PyErr_Format(PyExc_RuntimeError, "%s(): arm() has not been called", fn);
        return -1;
    }
    if (PyThread_get_thread_ident() != g.thread) {
        PyErr_Format(PyExc_RuntimeError, "%s(): called from thread %lu; only the thread that called arm() (%lu) may "
                     "use the guard", fn, PyThread_get_thread_ident(), g.thread);
        return -1;
    }
    if (g.in_run) {
        PyErr_Format(PyExc_RuntimeError, "%s(): not allowed while run_calls is timing calls (called from a kernel)", fn);
        return -1;
    }
    return 0;
}

static int cuda_error(const char *what, CUresult rc) {
    const char *name = NULL;
    if (cu.get_error_name == NULL || cu.get_error_name(rc, &name) != 0 || name == NULL) name = "unknown error";
    PyErr_Format(PyExc_RuntimeError, "%s failed: %s (CUresult %d)", what, name, rc);
    return -1;
}

/* Open the driver on first use; check this thread has a current context; make the two timed events once. */
static int cuda_ready(void) {
    if (cu.lib == NULL) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            PyErr_Format(PyExc_RuntimeError, "cannot time on a CUDA stream: libcuda.so.1 not loadable (%s)", dlerror());
            return -1;
        }
        cu.ctx_get_current = (CUresult(*)(CUcontext *))dlsym(lib, "cuCtxGetCurrent");
        cu.event_create = (CUresult(*)(CUevent *, unsigned int))dlsym(lib, "cuEventCreate");
        cu.event_record = (CUresult(*)(CUevent, CUstream))dlsym(lib, "cuEventRecord");
        cu.event_synchronize = (CUresult(*)(CUevent))dlsym(lib, "cuEventSynchronize");
        cu.event_elapsed_ms = (CUresult(*)(float *, CUevent, CUevent))dlsym(lib, "cuEventElapsedTime_v2");
        if (cu.event_elapsed_ms == NULL)  /* drivers before CUDA 12.8 */
            cu.event_elapsed_ms = (CUresult(*)(float *, CUevent, CUevent))dlsym(lib, "cuEventElapsedTime");
        cu.get_error_name = (CUresult(*)(CUresult, const char **))dlsym(lib, "cuGetErrorName");
        if (!cu.ctx_get_current || !cu.event_create || !cu.event_record || !cu.event_synchronize ||
            !cu.event_elapsed_ms) {
            PyErr_SetString(PyExc_RuntimeError, "libcuda.so.1 lacks a driver function the guard needs");
            return -1;
        }
        cu.lib = lib;
    }
    CUcontext ctx = NULL;
    CUresult rc = cu.ctx_get_current(&ctx);
    if (rc != 0) return cuda_error("cuCtxGetCurrent", rc);
    if (ctx == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "no current CUDA context on this thread: initialise CUDA (torch) first");
        return -1;
    }
    if (g.ev_start == NULL) {
        if ((rc = cu.event_create(&g.ev_start, 0)) != 0) return cuda_error("cuEventCreate", rc);
        if ((rc = cu.event_create(&g.ev_end, 0)) != 0) return cuda_error("cuEventCreate", rc);
        g.ctx = ctx;
    } else if (ctx != g.ctx) {
        PyErr_SetString(PyExc_RuntimeError, "the current CUDA context changed since the guard's events were made");
        return -1;
    }
    return 0;
}

/* ---- the module's functions ---- */
static PyObject *capture(const char *module_name, const char *name) {
    PyObject *m = PyImport_ImportModule(module_name);
    if (m == NULL) return NULL;
    PyObject *r = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    return r;
}

static int arm_monitoring(void) {
    PyObject *mon = PySys_GetObject("monitoring");  /* borrowed; absent before 3.12 */
    if (mon == NULL) return 0;
    if (!(g.mon_register = PyObject_GetAttrString(mon, "register_callback")) ||
        !(g.mon_get_tool = PyObject_GetAttrString(mon, "get_tool")) ||
        !(g.mon_set_events = PyObject_GetAttrString(mon, "set_events")) ||
        !(g.mon_free_tool = PyObject_GetAttrString(mon, "free_tool_id")))
        return -1;
    PyObject *events = PyObject_GetAttrString(mon, "events"), *list = PyList_New(0);
    PyObject *names = events ? PyObject_Dir(events) : NULL;
    for (Py_ssize_t i = 0; names && i < PyList_GET_SIZE(names); i++) {
        PyObject *v = PyObject_GetAttr(events, PyList_GET_ITEM(names, i));
        if (v == NULL) break;
        long e = PyLong_Check(v) ? PyLong_AsLong(v) : 0;
        if (e > 0 && (e & (e - 1)) == 0 && PyList_Append(list, v) < 0) e = -1;  /* single events only */
        Py_DECREF(v);
        if (e < 0 && PyErr_Occurred()) break;
    }
    Py_XDECREF(events);
    Py_XDECREF(names);
    if (PyErr_Occurred() || list == NULL) { Py_XDECREF(list); return -1; }
    g.mon_events = PyList_AsTuple(list);
    Py_DECREF(list);
    for (int tool = 0; tool < 6 && g.mon_events; tool++) {
        PyObject *name = call(g.mon_get_tool, "(i)", tool);
        if (name == NULL) return -1;
        g.mon_in_use[tool] = name != Py_None;
        Py_DECREF(name);
    }
    return g.mon_events ? 0 : -1;
}

/* The baseline handler and a name for every valid signal, through _signal's builtins (signal.getsignal is Python). */
static int arm_signals(void) {
    PyObject *signal = PyImport_ImportModule("signal"), *csignal = PyImport_ImportModule("_signal");
    PyObject *valid = signal ? PyObject_CallMethod(signal, "valid_signals", NULL) : NULL;
    PyObject *nums = valid ? PySequence_List(valid) : NULL, *names = PyList_New(0), *handlers = PyList_New(0);
    Py_XDECREF(valid);
    int rc = csignal && nums && names && handlers && PyList_Sort(nums) == 0 &&
             (g.getsignal = PyObject_GetAttrString(csignal, "getsignal")) &&
             (g.setsignal = PyObject_GetAttrString(csignal, "signal")) &&
             (g.sig_dfl = PyObject_GetAttrString(csignal, "SIG_DFL")) ? 0 : -1;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(nums); i++) {
        PyObject *num = PyList_GET_ITEM(nums, i);
        int signum = (int)PyLong_AsLong(num);
        PyObject *member = PyObject_CallMethod(signal, "Signals", "O", num);
        PyObject *name = member ? PyObject_GetAttrString(member, "name") : NULL;
        if (member == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {  /* real-time signals have no member */
            PyErr_Clear();
            name = PyUnicode_FromFormat("signal %d", signum);
        }
        PyObject *h = name ? call(g.getsignal, "(O)", num) : NULL;
        rc = (h && signum > 0 && signum < NSIG && PyList_Append(names, name) == 0 && PyList_Append(handlers, h) == 0
              && sigaction(signum, NULL, &g.sig_actions[signum]) == 0) ? 0 : -1;
        Py_XDECREF(member), Py_XDECREF(name), Py_XDECREF(h);
    }
    if (rc == 0) {
        g.sig_numbers = PyList_AsTuple(nums), g.sig_names = PyList_AsTuple(names);
        g.sig_handlers = PyList_AsTuple(handlers);
        rc = g.sig_numbers && g.sig_names && g.sig_handlers ? 0 : -1;
    }
    Py_XDECREF(signal), Py_XDECREF(csignal), Py_XDECREF(nums), Py_XDECREF(names), Py_XDECREF(handlers);
    return rc;
}

static PyObject *arm(PyObject *self, PyObject *unused) {
    if (g.armed) {
        PyErr_SetString(PyExc_RuntimeError, "arm(): already armed (once per process, before the submission is imported)");
        return NULL;
    }
    PyObject *main = capture("threading", "main_thread"), *t = main ? PyObject_CallNoArgs(main) : NULL;
    PyObject *ident = t ? PyObject_GetAttrString(t, "ident") : NULL;
    Py_XDECREF(main), Py_XDECREF(t);
    if (ident == NULL) return NULL;
    unsigned long main_ident = PyLong_AsUnsignedLong(ident);
    Py_DECREF(ident);
    if (main_ident != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "arm(): must be called from the main thread (signal handlers are reset there)");
        return NULL;
    }
    const int timers[3] = {ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF};
    for (int i = 0; i < 3; i++) {
        struct itimerval now;
        g.timer_armed[i] = getitimer(timers[i], &now) == 0 && (now.it_value.tv_sec || now.it_value.tv_usec);
    }
    PyThreadState *ts = PyThreadState_Get();
    g.trace_func = ts->c_tracefunc, g.profile_func = ts->c_profilefunc;
    g.trace_obj = Py_XNewRef(ts->c_traceobj), g.profile_obj = Py_XNewRef(ts->c_profileobj);
    g.gc_was_enabled = PyGC_IsEnabled();
    g.unraisablehook = Py_XNewRef(PySys_GetObject("unraisablehook"));
    if (!(g.gc_callbacks = capture("gc", "callbacks")) || !PyList_Check(g.gc_callbacks) ||
        !(g.gc_callbacks_base = PyList_AsTuple(g.gc_callbacks)) || arm_monitoring() < 0 || arm_signals() < 0 ||
        !(g.notes = PyList_New(0)) || !(g.graveyard = PyList_New(0)) || PySys_AddAuditHook(audit, NULL) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "arm(): could not take the baseline");
        return NULL;
    }
    g.thread = main_ident;
    g.armed = 1;
    Py_RETURN_NONE;
}

static PyObject *scrub(PyObject *self, PyObject *unused) {
    if (check_caller("scrub") < 0 || scrub_all() < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *cleared(PyObject *self, PyObject *unused) {
    if (check_caller("cleared") < 0) return NULL;
    PyObject *fresh = PyList_New(0), *found = g.notes;
    if (fresh == NULL) return NULL;
    g.notes = fresh;
    return found;
}

static PyObject *release(PyObject *self, PyObject *unused) {
    if (check_caller("release") < 0) return NULL;
    PyObject *fresh = PyList_New(0), *dead = g.graveyard;
    if (fresh == NULL) return NULL;
    g.graveyard = fresh;
    if (g.gc_was_enabled) PyGC_Enable();
    Py_DECREF(dead);  /* finalizers of what was buried may run now: the reply is out */
    Py_RETURN_NONE;
}

static PyObject *read_line(PyObject *self, PyObject *arg) {
    if (check_caller("read_line") < 0) return NULL;
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    if (g.pending_len > 0 && fd != g.pending_fd) {
        PyErr_Format(PyExc_RuntimeError, "read_line(%ld): %zd bytes read from fd %d are still unreturned", fd,
                     g.pending_len, g.pending_fd);
        return NULL;
    }
    g.pending_fd = (int)fd;
    PyObject *line = NULL;
    Py_ssize_t scanned = 0;
    while (line == NULL) {
        char *nl = g.pending_len > scanned ? memchr(g.pending + scanned, '\n', g.pending_len - scanned) : NULL;
        if (nl != NULL) {
            Py_ssize_t n = nl - g.pending + 1;
            if ((line = PyBytes_FromStringAndSize(g.pending, n)) == NULL) return NULL;
            memmove(g.pending, g.pending + n, g.pending_len - n);
            g.pending_len -= n;
            break;
        }
        scanned = g.pending_len;
        if (g.pending_cap - g.pending_len < 65536) {
            char *grown = PyMem_Realloc(g.pending, g.pending_cap + 65536);
            if (grown == NULL) return PyErr_NoMemory();
            g.pending = grown, g.pending_cap += 65536;
        }
        ssize_t got;
        Py_BEGIN_ALLOW_THREADS
        got = read((int)fd, g.pending + g.pending_len, g.pending_cap - g.pending_len);
        Py_END_ALLOW_THREADS
        if (got < 0 && errno == EINTR) {  /* handlers run only once scrubbed back to the baseline's */
            if (scrub_all() < 0 || PyErr_CheckSignals() < 0) return NULL;
            continue;
        }
        if (got < 0) return PyErr_Format(PyExc_OSError, "read_line(%ld): %s", fd, strerror(errno));
        if (got == 0) {
            line = PyBytes_FromStringAndSize(g.pending, g.pending_len);  /* EOF: the unterminated rest, or b"" */
            g.pending_len = 0;
            if (line == NULL) return NULL;
        }
        g.pending_len += got;
    }
    PyGC_Disable();
    if (scrub_all() < 0) {
        Py_DECREF(line);
        return NULL;
    }
    return line;
}

static PyObject *run_calls(PyObject *self, PyObject *args) {
    PyObject *kernel, *inputs, *stream_obj;
    if (!PyArg_ParseTuple(args, "OOO:run_calls", &kernel, &inputs, &stream_obj) || check_caller("run_calls") < 0)
        return NULL;
    if (!PyCallable_Check(kernel))
        return PyErr_Format(PyExc_TypeError, "run_calls(): kernel must be callable, got %s", Py_TYPE(kernel)->tp_name);
    int cuda = stream_obj != Py_None;
    if (cuda && !PyLong_Check(stream_obj))
        return PyErr_Format(PyExc_TypeError, "run_calls(): stream must be an int (a CUstream handle, 0 = legacy "
                            "default) or None (CPU clock), got %s", Py_TYPE(stream_obj)->tp_name);
    CUstream stream = cuda ? (CUstream)PyLong_AsVoidPtr(stream_obj) : NULL;
    if (PyErr_Occurred() || (cuda && cuda_ready() < 0)) return NULL;
    PyObject *items = PySequence_Check(inputs) ? PySequence_Tuple(inputs) : NULL;  /* a copy the kernel can't edit */
    if (items == NULL) {
        if (!PySequence_Check(inputs))
            PyErr_Format(PyExc_TypeError, "run_calls(): inputs must be a sequence, got %s", Py_TYPE(inputs)->tp_name);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items), done = 0;
    PyObject **out = PyMem_Calloc(n > 0 ? n : 1, sizeof(PyObject *));
    if (out == NULL) { Py_DECREF(items); return PyErr_NoMemory(); }
    PyGC_Disable();
    g.marks = MARKS_NONE;
    CUresult rc_start = 0, rc_end = 0;
    if (scrub_all() < 0) goto fail;

    g.in_run = 1;
    if (cuda) rc_start = cu.event_record(g.ev_start, stream);
    else clock_gettime(CLOCK_MONOTONIC, &g.t_start);
    for (; rc_start == 0 && done < n; done++)
        if ((out[done] = PyObject_CallOneArg(kernel, PyTuple_GET_ITEM(items, done))) == NULL) break;
    if (cuda) rc_end = cu.event_record(g.ev_end, stream);
    else clock_gettime(CLOCK_MONOTONIC, &g.t_end);
    PyGC_Disable();  /* the kernel may have enabled it */

    PyObject *exc_type = NULL, *exc = NULL, *tb = NULL;
    PyErr_Fetch(&exc_type, &exc, &tb);
    int scrubbed = scrub_all();
    g.in_run = 0;
    if (exc_type != NULL) {  /* the kernel raised: its exception goes up, the outputs so far are dropped */
        if (scrubbed < 0) { PyErr_Clear(); note("scrub incomplete after the kernel raised"); }
        PyErr_Restore(exc_type, exc, tb);
        goto fail;
    }
    if (scrubbed < 0) goto fail;
    if (rc_start != 0 || rc_end != 0) {
        cuda_error("cuEventRecord", rc_start != 0 ? rc_start : rc_end);
        goto fail;
    }
    g.marks = cuda ? MARKS_CUDA : MARKS_CPU;
    PyObject *result = PyList_New(n);
    if (result == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) PyList_SET_ITEM(result, i, out[i]);
    PyMem_Free(out);
    if (bury(items) < 0) PyErr_Clear();  /* our copy may hold the last reference to an input */
    Py_DECREF(items);
    return result;

fail:
    g.in_run = 0;
    PyErr_Fetch(&exc_type, &exc, &tb);
    for (Py_ssize_t i = 0; i < done && i < n; i++) {
        if (out[i] != NULL && bury(out[i]) < 0) PyErr_Clear();
        Py_XDECREF(out[i]);
    }
    if (bury(items) < 0) PyErr_Clear();
    Py_DECREF(items);
    PyMem_Free(out);
    PyErr_Restore(exc_type, exc, tb);
    return NULL;
}

static PyObject *elapsed_ns(PyObject *self, PyObject *unused) {
    if (check_caller("elapsed_ns") < 0) return NULL;
    if (g.marks == MARKS_CPU)
        return PyFloat_FromDouble((double)(g.t_end.tv_sec - g.t_start.tv_sec) * 1e9 +
                                  (double)(g.t_end.tv_nsec - g.t_start.tv_nsec));
    if (g.marks != MARKS_CUDA)
        return PyErr_Format(PyExc_RuntimeError, "elapsed_ns(): no run_calls has completed a timed window yet");
    CUresult rc;
    float ms = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = cu.event_synchronize(g.ev_end);
    Py_END_ALLOW_THREADS
    if (rc != 0) return cuda_error("cuEventSynchronize", rc), NULL;
    if ((rc = cu.event_elapsed_ms(&ms, g.ev_start, g.ev_end)) != 0) return cuda_error("cuEventElapsedTime", rc), NULL;
    return PyFloat_FromDouble((double)ms * 1e6);
}

static PyObject *ms_after_start(PyObject *self, PyObject *arg) {
    if (check_caller("ms_after_start") < 0) return NULL;
    if (g.marks != MARKS_CUDA)
        return PyErr_Format(PyExc_RuntimeError, "ms_after_start(): the last run_calls was not timed on a CUDA stream");
    CUevent ev = (CUevent)PyLong_AsVoidPtr(arg);
    if (PyErr_Occurred()) return NULL;
    if (ev == NULL) return PyErr_Format(PyExc_ValueError, "ms_after_start(): expected a CUevent handle, got 0");
    CUresult rc;
    float ms = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = cu.event_synchronize(ev);
    if (rc == 0) rc = cu.event_synchronize(g.ev_start);
    Py_END_ALLOW_THREADS
    if (rc != 0) return cuda_error("cuEventSynchronize", rc), NULL;
    if ((rc = cu.event_elapsed_ms(&ms, g.ev_start, ev)) != 0) return cuda_error("cuEventElapsedTime", rc), NULL;
    return PyFloat_FromDouble(ms);
}

static PyMethodDef methods[] = {
    {"arm", arm, METH_NOARGS, "Take the baseline; once, in the main thread, before the submission is imported."},
    {"read_line", read_line, METH_O, "read_line(fd) -> bytes: one line (b'' at EOF), then gc off and scrub()."},
    {"run_calls", run_calls, METH_VARARGS, "run_calls(kernel, inputs, stream) -> list: the timed window."},
    {"elapsed_ns", elapsed_ns, METH_NOARGS, "elapsed_ns() -> float: the last window's end minus start, ns."},
    {"ms_after_start", ms_after_start, METH_O, "ms_after_start(event) -> float: ms from the start mark to event."},
    {"scrub", scrub, METH_NOARGS, "Remove trace/profile/monitoring hooks, signal handlers, gc and unraisable hooks."},
    {"cleared", cleared, METH_NOARGS, "cleared() -> list[str]: what scrub found since the last call."},
    {"release", release, METH_NOARGS, "Re-enable gc (if it was on at arm()) and drop what scrub and run_calls kept."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fp4bench_guard", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fp4bench_guard(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "HELD_IN", "C") < 0) Py_CLEAR(m);
    return m;
}
