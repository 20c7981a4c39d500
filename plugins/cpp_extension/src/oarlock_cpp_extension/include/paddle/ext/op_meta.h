// PD_BUILD_OP / PD_BUILD_GRAD_OP / PD_BUILD_DOUBLE_GRAD_OP and PD_KERNEL: what a custom operator declares
// (inputs, outputs, attributes, kernel), kept in one table per shared library, which the C ABI
// (oarlock_op_abi.cc) describes to Python and runs. PD_KERNEL turns a function of any supported signature
// into one uniform entry point reading its arguments from a KernelContext.
#pragma once

#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "paddle/ext/tensor.h"

namespace paddle {

inline std::string Grad(const std::string& name) { return name + "@GRAD"; }
inline std::string Vec(const std::string& name) { return name + "@VECTOR"; }
inline std::string Optional(const std::string& name) { return name + "@OPTIONAL"; }
// a higher-order gradient op's output whose plain name is taken: New(Grad("Out")) is the gradient of "Out"
inline std::string New(const std::string& name) { return name + "@NEW"; }

// One attribute value as Python sent it; the kernel's parameter type picks the field.
struct AttrValue {
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
};

// The arguments of one kernel call and, after it, its outputs.
struct KernelContext {
  std::vector<std::vector<Tensor>> inputs;  // one entry per declared input (a vector input: several)
  std::vector<bool> input_none;             // an optional input the caller gave as None
  std::vector<AttrValue> attrs;             // one per declared attribute
  std::vector<Tensor> outputs;              // Tensor* arguments write here; returned tensors replace them
  bool returned = false;
};

using KernelFunc = void (*)(KernelContext*);
using InferShapeFunc = void*;  // accepted and kept; oarlock runs the kernel to learn output shapes
using InferDtypeFunc = void*;

struct OpMetaInfo {
  std::string name;
  int grad_level = 0;  // 0: the op, 1: PD_BUILD_GRAD_OP, 2: PD_BUILD_DOUBLE_GRAD_OP
  std::vector<std::string> inputs, outputs, attrs;
  std::unordered_map<std::string, std::string> inplace;
  KernelFunc kernel = nullptr;
};

// `inline`: one table per shared library, however many of its sources include this header.
inline std::vector<OpMetaInfo>& OpMetaInfoTable() {
  static std::vector<OpMetaInfo> table;
  return table;
}

class OpMetaInfoBuilder {
 public:
  OpMetaInfoBuilder(std::string name, int grad_level) : index_(OpMetaInfoTable().size()) {
    OpMetaInfo info;
    info.name = std::move(name);
    info.grad_level = grad_level;
    OpMetaInfoTable().push_back(std::move(info));
  }
  OpMetaInfoBuilder& Inputs(std::vector<std::string>&& names) { meta().inputs = names; return *this; }
  OpMetaInfoBuilder& Outputs(std::vector<std::string>&& names) { meta().outputs = names; return *this; }
  OpMetaInfoBuilder& Attrs(std::vector<std::string>&& names) { meta().attrs = names; return *this; }
  OpMetaInfoBuilder& SetInplaceMap(std::unordered_map<std::string, std::string>&& map) {
    meta().inplace = map;
    return *this;
  }
  OpMetaInfoBuilder& SetKernelFn(KernelFunc fn) { meta().kernel = fn; return *this; }
  template <typename F>
  OpMetaInfoBuilder& SetInferShapeFn(F) { return *this; }
  template <typename F>
  OpMetaInfoBuilder& SetInferDtypeFn(F) { return *this; }
  template <typename F>
  OpMetaInfoBuilder& SetInferSpmdFn(F) { return *this; }

 private:
  OpMetaInfo& meta() { return OpMetaInfoTable()[index_]; }
  size_t index_;
};

namespace ext_detail {

template <typename T> struct TypeTag {};

template <typename T>
std::vector<T> convert_list(const std::vector<int64_t>& v) { return std::vector<T>(v.begin(), v.end()); }
template <typename T>
std::vector<T> convert_list(const std::vector<double>& v) { return std::vector<T>(v.begin(), v.end()); }

template <typename A> struct AttrReader;
#define OARLOCK_ATTR_READER(TYPE, EXPR) \
  template <> struct AttrReader<TYPE> { static TYPE read(const AttrValue& a) { return EXPR; } };
OARLOCK_ATTR_READER(bool, a.i != 0)
OARLOCK_ATTR_READER(int, static_cast<int>(a.i))
OARLOCK_ATTR_READER(int64_t, a.i)
OARLOCK_ATTR_READER(float, static_cast<float>(a.f))
OARLOCK_ATTR_READER(double, a.f)
OARLOCK_ATTR_READER(std::string, a.s)
OARLOCK_ATTR_READER(std::vector<int>, convert_list<int>(a.ints))
OARLOCK_ATTR_READER(std::vector<int64_t>, a.ints)
OARLOCK_ATTR_READER(std::vector<float>, convert_list<float>(a.floats))
OARLOCK_ATTR_READER(std::vector<double>, a.floats)
OARLOCK_ATTR_READER(std::vector<std::string>, a.strings)
#undef OARLOCK_ATTR_READER

template <typename F, F f> struct KernelImpl;

template <typename Return, typename... Args, Return (*fn)(Args...)>
struct KernelImpl<Return (*)(Args...), fn> {
  static void Compute(KernelContext* ctx) { Helper<Args..., TypeTag<int>>::template Run<0, 0, 0>(ctx); }

 private:
  template <typename... Rest> struct Helper;

  // an input tensor (const or, for an in-place input, mutable)
  template <typename... Tail> struct Helper<const Tensor&, Tail...> {
    template <int in, int attr, int out, typename... Prev>
    static void Run(KernelContext* ctx, Prev&&... prev) {
      Helper<Tail...>::template Run<in + 1, attr, out>(ctx, std::forward<Prev>(prev)..., ctx->inputs[in][0]);
    }
  };
  template <typename... Tail> struct Helper<Tensor&, Tail...> {
    template <int in, int attr, int out, typename... Prev>
    static void Run(KernelContext* ctx, Prev&&... prev) {
      Helper<Tail...>::template Run<in + 1, attr, out>(ctx, std::forward<Prev>(prev)..., ctx->inputs[in][0]);
    }
  };
  template <typename... Tail> struct Helper<const std::vector<Tensor>&, Tail...> {
    template <int in, int attr, int out, typename... Prev>
    static void Run(KernelContext* ctx, Prev&&... prev) {
      Helper<Tail...>::template Run<in + 1, attr, out>(ctx, std::forward<Prev>(prev)..., ctx->inputs[in]);
    }
  };
  template <typename... Tail> struct Helper<std::vector<Tensor>&, Tail...> {
    template <int in, int attr, int out, typename... Prev>
    static void Run(KernelContext* ctx, Prev&&... prev) {
      Helper<Tail...>::template Run<in + 1, attr, out>(ctx, std::forward<Prev>(prev)..., ctx->inputs[in]);
    }
  };
  template <typename... Tail> struct Helper<const paddle::optional<Tensor>&, Tail...> {
    template <int in, int attr, int out, typename... Prev>
    static void Run(KernelContext* ctx, Prev&&... prev) {
      paddle::optional<Tensor> arg;
      if (!ctx->input_none[in]) arg = paddle::optional<Tensor>(ctx->inputs[in][0]);
      Helper<Tail...>::template Run<in + 1, attr, out>(ctx, std::forward<Prev>(prev)..., arg);
    }
  };
  // an output the kernel writes (Paddle's "out" form: void kernel(const Tensor& x, Tensor* out))
  template <typename... Tail> struct Helper<Tensor*, Tail...> {
    template <int in, int attr, int out, typename... Prev>
    static void Run(KernelContext* ctx, Prev&&... prev) {
      Tensor* arg = &ctx->outputs[out];
      Helper<Tail...>::template Run<in, attr, out + 1>(ctx, std::forward<Prev>(prev)..., arg);
    }
  };
  // an attribute, by value or by const reference
  template <typename A, typename... Tail> struct Helper<A, Tail...> {
    template <int in, int attr, int out, typename... Prev>
    static void Run(KernelContext* ctx, Prev&&... prev) {
      using Plain = std::remove_cv_t<std::remove_reference_t<A>>;
      Plain arg = AttrReader<Plain>::read(ctx->attrs[attr]);
      Helper<Tail...>::template Run<in, attr + 1, out>(ctx, std::forward<Prev>(prev)..., arg);
    }
  };
  // every argument read: call the kernel
  template <typename T> struct Helper<TypeTag<T>> {
    template <int in, int attr, int out, typename... Prev>
    static void Run(KernelContext* ctx, Prev&&... prev) {
      if constexpr (std::is_void_v<Return>) {
        fn(std::forward<Prev>(prev)...);
      } else {
        ctx->outputs = fn(std::forward<Prev>(prev)...);
        ctx->returned = true;
      }
    }
  };
};

}  // namespace ext_detail
}  // namespace paddle

#define PD_KERNEL(...) ::paddle::ext_detail::KernelImpl<decltype(&__VA_ARGS__), &__VA_ARGS__>::Compute
#define PD_INFER_SHAPE(...) (static_cast<void*>(nullptr))
#define PD_INFER_DTYPE(...) (static_cast<void*>(nullptr))
#define PD_INFER_SPMD_RULE(...) (static_cast<void*>(nullptr))

#define OARLOCK_CONCAT_INNER(A, B) A##B
#define OARLOCK_CONCAT(A, B) OARLOCK_CONCAT_INNER(A, B)

#define PD_BUILD_OP(op_name) \
  static ::paddle::OpMetaInfoBuilder __op_meta_info_##op_name##__ = ::paddle::OpMetaInfoBuilder(#op_name, 0)
#define PD_BUILD_GRAD_OP(op_name) \
  static ::paddle::OpMetaInfoBuilder __grad_op_meta_info_##op_name##__ = ::paddle::OpMetaInfoBuilder(#op_name, 1)
#define PD_BUILD_DOUBLE_GRAD_OP(op_name)                                      \
  static ::paddle::OpMetaInfoBuilder __double_grad_op_meta_info_##op_name##__ = \
      ::paddle::OpMetaInfoBuilder(#op_name, 2)
