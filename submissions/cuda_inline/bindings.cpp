// Python bindings of the cuda_inline variant; the implementation is in kernel.cu (compiled by nvcc).
#include <torch/extension.h>

#include <vector>

namespace fp4bench_cuda_inline {
at::Tensor encode_operand_map(const at::Tensor &operand, int64_t rows, int64_t k, int64_t box_rows);
void grouped_gemm(const std::vector<at::Tensor> &a, const std::vector<at::Tensor> &b,
                  const std::vector<at::Tensor> &c, const std::vector<at::Tensor> &sfa,
                  const std::vector<at::Tensor> &sfb, const std::vector<at::Tensor> &a_maps,
                  const std::vector<at::Tensor> &b_maps, const std::vector<int64_t> &mnk, const at::Tensor &tiles);
}  // namespace fp4bench_cuda_inline

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("encode_operand_map", torch::wrap_pybind_function(fp4bench_cuda_inline::encode_operand_map),
        "TMA tensor map of a K-major fp4 operand [rows, K/2, 1] as 128 CPU bytes: (operand, rows, k, box_rows)");
  m.def("grouped_gemm", torch::wrap_pybind_function(fp4bench_cuda_inline::grouped_gemm),
        "Launch on the default queue: (a, b, c, sfa_reordered, sfb_reordered, a_maps, b_maps, mnk, tiles)");
}
