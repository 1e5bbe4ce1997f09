// wgmma_sm90's per-call host path in C++: compare every input tensor's layout with the last validated one, write
// the group addresses into the kernel's parameter block and launch (the pre-pass, then the main kernel, when the
// plan predecodes A), in one call from Python. The Python version
// of the same path (submission.py) spends most of a call creating shape and stride objects; this reads them in
// place. Built once with torch.utils.cpp_extension (wgmma_sm90_host.load_fast_call) from the two headers it needs
// rather than torch/extension.h, whose C++ frontend (torch/all.h) made the build 4x slower (64 -> 14 s on a 2-core
// CPU, 2026-12-02), most of a leaderboard's wall time on a fresh machine; no CUDA headers: the driver's
// cuLaunchKernel comes in as an address, and so does cuLaunchKernelEx when the plan uses programmatic dependent
// launch for the main kernel (PDL: it may start while the kernel queued before it ends; kernel.cu's
// pdl_begin waits). Every launch goes to the default (legacy, NULL) queue: torch's current one in fp4bench's worker
// and in the official runner, which leave it so. The pre-pass is a plain launch (it waits for the previous call's main kernel in full) unless
// pre_pdl: the int8 pre-pass writes nothing before its own griddepcontrol.wait (wgmma_sm90_host.choose_pre_pdl).
#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace {

// cuLaunchKernel(f, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMemBytes, queue, kernelParams, extra); the
// queue is always NULL here (the default one).
using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                         void**);

// cuda.h's CUlaunchAttribute (an id, padding to 8 bytes, a 64-byte value union) and CUlaunchConfig, for
// cuLaunchKernelEx(config, f, kernelParams, extra); attribute id 6 is programmatic dependent launch (PDL).
struct LaunchAttribute {
  int id;
  int pad;
  int value[16];
};
struct LaunchConfig {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, smem;
  void* queue;  // NULL: the default one
  LaunchAttribute* attrs;
  unsigned num_attrs;
};
static_assert(sizeof(LaunchAttribute) == 72 && sizeof(LaunchConfig) == 56, "cuda.h's launch structs");
using LaunchExFn = int (*)(const LaunchConfig*, void*, void**, void**);
constexpr int kProgrammaticDependentLaunch = 6;

struct Layout {
  c10::ScalarType dtype;
  std::vector<int64_t> sizes, strides;
  c10::Device device;
};

Layout layout_of(const at::Tensor& t) {
  return {t.scalar_type(), t.sizes().vec(), t.strides().vec(), t.device()};
}

bool same(const Layout& l, const at::Tensor& t) {
  return t.scalar_type() == l.dtype && t.sizes() == c10::IntArrayRef(l.sizes) &&
         t.strides() == c10::IntArrayRef(l.strides) && t.device() == l.device;
}

// One plan's launch: the parameter block (the Python Params struct, kept alive by the caller) and the launch
// geometry of the main kernel and of the pre-pass (pre_func 0: none; it shares the parameter block), plus the
// layouts of the last validated call (a, b, c, sfa, sfb of each group in turn). launch_ex: cuLaunchKernelEx's
// address to launch the main kernel with programmatic dependent launch (PDL), or 0 for plain cuLaunchKernel.
// epoch: the address of the parameter block's epoch (the int8 path), counted up before every launch as
// wgmma_sm90_host.next_epoch does, or 0.
class FastCall {
 public:
  FastCall(uint64_t params, int64_t max_groups, uint64_t func, int64_t grid, int64_t threads, int64_t smem,
           uint64_t pre_func, int64_t pre_grid, int64_t pre_threads, uint64_t launch, uint64_t launch_ex,
           uint64_t epoch, bool pre_pdl)
      : addr_(reinterpret_cast<uint64_t*>(params)),
        max_groups_(max_groups),
        func_(reinterpret_cast<void*>(func)),
        grid_(static_cast<unsigned>(grid)),
        threads_(static_cast<unsigned>(threads)),
        smem_(static_cast<unsigned>(smem)),
        pre_func_(reinterpret_cast<void*>(pre_func)),
        pre_grid_(static_cast<unsigned>(pre_grid)),
        pre_threads_(static_cast<unsigned>(pre_threads)),
        launch_(reinterpret_cast<LaunchFn>(launch)),
        launch_ex_(reinterpret_cast<LaunchExFn>(launch_ex)),
        epoch_(reinterpret_cast<int32_t*>(epoch)),
        pre_pdl_(pre_pdl),
        kparams_{reinterpret_cast<void*>(params)} {
    if (pre_pdl && (launch_ex == 0 || pre_func == 0))
      throw std::invalid_argument("pre_pdl needs launch_ex and a pre-pass");
    pdl_.id = kProgrammaticDependentLaunch;
    pdl_.value[0] = 1;
  }

  // Remember the layouts of a call that validate() accepted.
  void remember(const std::vector<std::vector<at::Tensor>>& abc, const std::vector<std::vector<at::Tensor>>& sf) {
    layouts_.clear();
    for (size_t g = 0; g < abc.size(); ++g) {
      for (const auto& t : abc[g]) layouts_.push_back(layout_of(t));
      for (const auto& t : sf[g]) layouts_.push_back(layout_of(t));
    }
  }

  // Launches on the default queue when every tensor matches the remembered layout and every address is 16-byte aligned,
  // and returns the list of every group's c (the very objects in `abc`); returns 1, launching nothing, when one
  // does not or the arguments are not sequences of the remembered lengths holding tensors (the caller then
  // validates in full); 1000 + the CUresult when a cuLaunchKernel fails (the main kernel is not launched after a
  // failed pre-pass). `abc` and `sf` are read in place (lists or tuples of tensors): no conversion to C++
  // containers and no reference counting per tensor, which a cold first call of a timed window pays for in
  // cache misses.
  py::object run(py::handle abc, py::handle sf) {
    const Py_ssize_t groups = static_cast<Py_ssize_t>(layouts_.size() / 5);
    if (groups == 0 || !sized(abc.ptr(), groups) || !sized(sf.ptr(), groups)) return py::int_(1);
    PyObject* out = PyList_New(groups);
    if (out == nullptr) throw py::error_already_set();
    py::object result = py::reinterpret_steal<py::object>(out);
    size_t i = 0;
    for (Py_ssize_t g = 0; g < groups; ++g) {
      PyObject* abc_g = item(abc.ptr(), g);
      PyObject* sf_g = item(sf.ptr(), g);
      if (!sized(abc_g, 3) || !sized(sf_g, 2)) return py::int_(1);
      PyObject* ts[5] = {item(abc_g, 0), item(abc_g, 1), item(abc_g, 2), item(sf_g, 0), item(sf_g, 1)};
      for (int kind = 0; kind < 5; ++kind, ++i) {
        if (!THPVariable_Check(ts[kind])) return py::int_(1);
        const at::Tensor& t = THPVariable_Unpack(ts[kind]);
        if (!same(layouts_[i], t)) return py::int_(1);
        const auto p = reinterpret_cast<uint64_t>(t.data_ptr());
        if (p & 15) return py::int_(1);
        addr_[kind * max_groups_ + g] = p;
      }
      Py_INCREF(ts[2]);
      PyList_SET_ITEM(out, g, ts[2]);
    }
    if (epoch_ != nullptr) *epoch_ = *epoch_ >= INT32_MAX ? 1 : *epoch_ + 1;
    if (pre_func_ != nullptr) {
      const int err = launch(pre_func_, pre_grid_, pre_threads_, 0, pre_pdl_);
      if (err) return py::int_(1000 + err);
    }
    const int err = launch(func_, grid_, threads_, smem_, launch_ex_ != nullptr);
    if (err) return py::int_(1000 + err);
    return result;
  }

  // run() as a status: 0 after launching, else run()'s code.
  int64_t call(py::handle abc, py::handle sf) {
    py::object r = run(abc, sf);
    return PyList_Check(r.ptr()) ? 0 : r.cast<int64_t>();
  }

 private:
  // A list or tuple of exactly n items (anything else: the caller's full validation says what is wrong).
  static bool sized(PyObject* o, Py_ssize_t n) {
    return (PyList_Check(o) && PyList_GET_SIZE(o) == n) || (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == n);
  }
  // Item i of a list or tuple that sized() accepted (a borrowed reference).
  static PyObject* item(PyObject* o, Py_ssize_t i) {
    return PyList_Check(o) ? PyList_GET_ITEM(o, i) : PyTuple_GET_ITEM(o, i);
  }

  uint64_t* addr_;
  int64_t max_groups_;
  void* func_;
  unsigned grid_, threads_, smem_;
  void* pre_func_;
  unsigned pre_grid_, pre_threads_;
  int launch(void* func, unsigned grid, unsigned threads, unsigned smem, bool pdl) {
    if (!pdl) return launch_(func, grid, 1, 1, threads, 1, 1, smem, nullptr, kparams_, nullptr);
    const LaunchConfig config{grid, 1, 1, threads, 1, 1, smem, nullptr, &pdl_, 1};
    return launch_ex_(&config, func, kparams_, nullptr);
  }

  LaunchFn launch_;
  LaunchExFn launch_ex_;
  int32_t* epoch_;
  bool pre_pdl_;
  LaunchAttribute pdl_{};
  void* kparams_[1];
  std::vector<Layout> layouts_;
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<FastCall>(m, "FastCall")
      .def(py::init<uint64_t, int64_t, uint64_t, int64_t, int64_t, int64_t, uint64_t, int64_t, int64_t, uint64_t,
                    uint64_t, uint64_t, bool>())
      .def("remember", &FastCall::remember)
      .def("run", &FastCall::run)
      .def("call", &FastCall::call);
}
