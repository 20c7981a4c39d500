// The C ABI between one custom-operator library and oarlock (Python reaches it through ctypes; see
// oarlock_cpp_extension/abi.py, which mirrors these structs). Compiled into every library load() or
// setup() builds, once, next to the user's sources.
//
//   oarlock_op_count / oarlock_op_describe  the ops the library declared (PD_BUILD_*_OP), as text
//   oarlock_op_run                          run one op's kernel on borrowed arrays; returns a result handle
//   oarlock_result_*                        read the outputs; each output's storage stays alive until
//   oarlock_storage_release                 Python drops the array over it
//
// Memory: inputs are borrowed (never freed here); outputs are allocated by paddle::empty / mutable_data,
// on the host with malloc and, when built with OARLOCK_WITH_CUDA, on a GPU with cudaMalloc.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "paddle/extension.h"

#ifdef OARLOCK_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace paddle {

void* ext_allocate(size_t bytes, const Place& place) {
  if (place.GetType() == AllocationType::GPU) {
#ifdef OARLOCK_WITH_CUDA
    void* ptr = nullptr;
    cudaSetDevice(place.GetDeviceId());
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) PD_THROW("cudaMalloc of ", bytes, " bytes failed");
    return ptr;
#else
    PD_THROW("this custom-op library was built without CUDA (no .cu source): cannot allocate on ", place);
#endif
  }
  void* ptr = std::malloc(bytes);
  if (!ptr) PD_THROW("malloc of ", bytes, " bytes failed");
  return ptr;
}

void ext_free(void* ptr, const Place& place) {
#ifdef OARLOCK_WITH_CUDA
  if (place.GetType() == AllocationType::GPU) {
    cudaFree(ptr);
    return;
  }
#endif
  (void)place;
  std::free(ptr);
}

void ext_copy(void* dst, const Place& dst_place, const void* src, const Place& src_place, size_t bytes) {
  bool host = dst_place.GetType() != AllocationType::GPU && src_place.GetType() != AllocationType::GPU;
  if (host) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef OARLOCK_WITH_CUDA
  cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
#else
  PD_THROW("this custom-op library was built without CUDA (no .cu source): cannot copy to/from a GPU");
#endif
}

}  // namespace paddle

// Every library is compiled with -fvisibility=hidden, so that its op table (a static in an inline function,
// which GCC would otherwise make one process-wide STB_GNU_UNIQUE symbol) is its own; the ABI is exported.
#define OARLOCK_ABI __attribute__((visibility("default")))

extern "C" {

// One tensor crossing the ABI. An input with ndim < 0 is an optional input given as None.
struct oarlock_tensor {
  void* data;
  int64_t* shape;
  int32_t ndim;
  int32_t dtype;        // paddle::DataType
  int32_t device_type;  // paddle::AllocationType
  int32_t device_id;
  int32_t input_index;  // outputs: the input whose memory this output is (in place / returned as is), or -1
};

struct oarlock_attr {
  int64_t i;
  double f;
  const char* s;
  const int64_t* ints;
  const double* floats;
  const char* const* strings;
  int64_t length;
};

struct oarlock_result {
  std::vector<paddle::Tensor> outputs;
};

namespace {
thread_local std::string last_error;
thread_local std::string description;

void describe_list(std::ostringstream& os, const char* key, const std::vector<std::string>& items) {
  os << key;
  for (const auto& item : items) os << '\t' << item;
  os << '\n';
}
}  // namespace

OARLOCK_ABI const char* oarlock_last_error() { return last_error.c_str(); }

OARLOCK_ABI int oarlock_built_with_cuda() {
#ifdef OARLOCK_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}

OARLOCK_ABI int oarlock_op_count() { return static_cast<int>(paddle::OpMetaInfoTable().size()); }

// Lines "name\t<name>", "level\t<n>", "inputs\t...", "outputs\t...", "attrs\t...", "inplace\t<in>\t<out>..."
OARLOCK_ABI const char* oarlock_op_describe(int index) {
  const auto& meta = paddle::OpMetaInfoTable().at(static_cast<size_t>(index));
  std::ostringstream os;
  os << "name\t" << meta.name << "\nlevel\t" << meta.grad_level << "\nkernel\t" << (meta.kernel ? 1 : 0) << '\n';
  describe_list(os, "inputs", meta.inputs);
  describe_list(os, "outputs", meta.outputs);
  describe_list(os, "attrs", meta.attrs);
  os << "inplace";
  for (const auto& kv : meta.inplace) os << '\t' << kv.first << '\t' << kv.second;
  os << '\n';
  description = os.str();
  return description.c_str();
}

// Runs op `index`. `groups[k]` is how many tensors declared input k takes (1; a vector input: its length;
// an optional input given None: 0). Returns a result handle, or NULL with oarlock_last_error() set.
OARLOCK_ABI oarlock_result* oarlock_op_run(int index, const oarlock_tensor* tensors, const int32_t* groups, int n_inputs,
                               const oarlock_attr* attrs, int n_attrs) {
  try {
    const auto& meta = paddle::OpMetaInfoTable().at(static_cast<size_t>(index));
    if (!meta.kernel) PD_THROW("operator ", meta.name, " declares no kernel (SetKernelFn)");
    paddle::KernelContext ctx;
    int flat = 0;
    for (int k = 0; k < n_inputs; ++k) {
      std::vector<paddle::Tensor> group;
      for (int j = 0; j < groups[k]; ++j, ++flat) {
        const oarlock_tensor& t = tensors[flat];
        auto storage = std::make_shared<paddle::Storage>();
        paddle::DataType dtype = static_cast<paddle::DataType>(t.dtype);
        std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
        paddle::Place place(static_cast<paddle::AllocationType>(t.device_type), t.device_id);
        storage->ptr = t.data;
        storage->place = place;
        storage->input_index = flat;
        int64_t n = 1;
        for (auto d : shape) n *= d;
        storage->bytes = static_cast<size_t>(n) * paddle::SizeOf(dtype);
        group.emplace_back(storage, shape, dtype, place);
      }
      ctx.input_none.push_back(groups[k] == 0);
      if (group.empty()) group.emplace_back();
      ctx.inputs.push_back(std::move(group));
    }
    for (int a = 0; a < n_attrs; ++a) {
      paddle::AttrValue v;
      v.i = attrs[a].i;
      v.f = attrs[a].f;
      if (attrs[a].s) v.s = attrs[a].s;
      if (attrs[a].ints) v.ints.assign(attrs[a].ints, attrs[a].ints + attrs[a].length);
      if (attrs[a].floats) v.floats.assign(attrs[a].floats, attrs[a].floats + attrs[a].length);
      if (attrs[a].strings)
        for (int64_t j = 0; j < attrs[a].length; ++j) v.strings.emplace_back(attrs[a].strings[j]);
      ctx.attrs.push_back(std::move(v));
    }
    ctx.outputs.resize(meta.outputs.size());
    meta.kernel(&ctx);
    auto* result = new oarlock_result();
    if (ctx.returned && ctx.outputs.size() == meta.outputs.size()) {
      result->outputs = std::move(ctx.outputs);
      return result;
    }
    // an in-place output is the input mapped to it; the others come, in order, from the returned tensors or
    // the Tensor* arguments
    size_t next = 0;
    for (const auto& name : meta.outputs) {
      int source = -1;
      for (size_t k = 0; k < meta.inputs.size(); ++k) {
        auto it = meta.inplace.find(meta.inputs[k]);
        if (it != meta.inplace.end() && it->second == name) source = static_cast<int>(k);
      }
      if (source >= 0) {
        result->outputs.push_back(ctx.inputs[static_cast<size_t>(source)][0]);
      } else if (next < ctx.outputs.size()) {
        result->outputs.push_back(ctx.outputs[next++]);
      } else {
        delete result;
        PD_THROW("operator ", meta.name, " declares output ", name, " but its kernel gave no tensor for it");
      }
    }
    return result;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown C++ exception";
  }
  return nullptr;
}

OARLOCK_ABI int oarlock_result_count(const oarlock_result* result) { return static_cast<int>(result->outputs.size()); }

// Fills `out` for output i (its shape points into the result: copy it before oarlock_result_free) and
// returns a new reference to its storage (NULL for a borrowed input or an undefined output).
OARLOCK_ABI void* oarlock_result_get(oarlock_result* result, int i, oarlock_tensor* out) {
  paddle::Tensor& t = result->outputs.at(static_cast<size_t>(i));
  const auto& storage = t.storage();
  out->data = t.data();
  out->shape = const_cast<int64_t*>(t.shape().data());
  out->ndim = static_cast<int32_t>(t.shape().size());
  out->dtype = static_cast<int32_t>(t.dtype());
  out->device_type = static_cast<int32_t>(t.place().GetType());
  out->device_id = t.place().GetDeviceId();
  out->input_index = storage ? storage->input_index : -1;
  if (!storage || !storage->ptr || !storage->owned) return nullptr;
  return new std::shared_ptr<paddle::Storage>(storage);
}

OARLOCK_ABI void oarlock_result_free(oarlock_result* result) { delete result; }

OARLOCK_ABI void oarlock_storage_release(void* handle) { delete static_cast<std::shared_ptr<paddle::Storage>*>(handle); }

}  // extern "C"
