// paddle::Tensor as custom operators see it: a shape, a dtype, a place and shared storage. Inputs wrap the
// memory of oarlock's arrays (no copy); outputs own memory allocated by the C ABI (oarlock_op_abi.cc), which
// Python then wraps, again without a copy.
#pragma once

#include <complex>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "paddle/ext/enforce.h"

namespace paddle {

// The codes are the C ABI's (oarlock_cpp_extension/abi.py mirrors them).
enum class DataType : int32_t {
  UNDEFINED = 0, BOOL = 1, INT8 = 2, UINT8 = 3, INT16 = 4, INT32 = 5, INT64 = 6,
  FLOAT16 = 7, BFLOAT16 = 8, FLOAT32 = 9, FLOAT64 = 10, COMPLEX64 = 11, COMPLEX128 = 12,
};

enum class AllocationType : int32_t { UNDEFINED = 0, CPU = 1, GPU = 2, GPUPINNED = 3, CUSTOM = 4 };

inline const char* DataTypeName(DataType t) {
  static const char* names[] = {"undefined", "bool", "int8", "uint8", "int16", "int32", "int64",
                                "float16", "bfloat16", "float32", "float64", "complex64", "complex128"};
  int i = static_cast<int>(t);
  return (i >= 0 && i <= 12) ? names[i] : "unknown";
}
inline std::ostream& operator<<(std::ostream& os, DataType t) { return os << DataTypeName(t); }

inline size_t SizeOf(DataType t) {
  switch (t) {
    case DataType::BOOL: case DataType::INT8: case DataType::UINT8: return 1;
    case DataType::INT16: case DataType::FLOAT16: case DataType::BFLOAT16: return 2;
    case DataType::INT32: case DataType::FLOAT32: return 4;
    case DataType::INT64: case DataType::FLOAT64: case DataType::COMPLEX64: return 8;
    case DataType::COMPLEX128: return 16;
    default: return 0;
  }
}

class Place {
 public:
  Place() = default;
  explicit Place(AllocationType type, int device = 0) : type_(type), device_(device) {}
  AllocationType GetType() const { return type_; }
  int GetDeviceId() const { return device_; }
  bool operator==(const Place& o) const { return type_ == o.type_ && device_ == o.device_; }
  bool operator!=(const Place& o) const { return !(*this == o); }
  std::string DebugString() const {
    return type_ == AllocationType::GPU ? "Place(gpu:" + std::to_string(device_) + ")" : "Place(cpu)";
  }

 private:
  AllocationType type_ = AllocationType::UNDEFINED;
  int device_ = 0;
};
inline std::ostream& operator<<(std::ostream& os, const Place& p) { return os << p.DebugString(); }

// Paddle's older place enum, still used by custom-op sources: paddle::Tensor(paddle::PlaceType::kCPU, shape)
enum class PlaceType { kUNK = -1, kCPU, kGPU, kHIP, kXPU, kCUSTOM };
inline Place ToPlace(PlaceType t) {
  return t == PlaceType::kGPU ? Place(AllocationType::GPU, 0)
         : t == PlaceType::kCPU ? Place(AllocationType::CPU, 0) : Place();
}

inline bool operator==(const Place& p, PlaceType t) { return p == ToPlace(t); }
inline bool operator!=(const Place& p, PlaceType t) { return !(p == t); }

class CPUPlace : public Place {
 public:
  CPUPlace() : Place(AllocationType::CPU, 0) {}
};
class GPUPlace : public Place {
 public:
  explicit GPUPlace(int device = 0) : Place(AllocationType::GPU, device) {}
};

namespace dtype {
// 16-bit floats stored as their bits, converted through float (enough for kernels written against them).
struct float16 {
  uint16_t x = 0;
  float16() = default;
  float16(float f);  // NOLINT: implicit as in Paddle
  operator float() const;
};
struct bfloat16 {
  uint16_t x = 0;
  bfloat16() = default;
  bfloat16(float f) {  // round to nearest even
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits += 0x7FFF + ((bits >> 16) & 1);
    x = static_cast<uint16_t>(bits >> 16);
  }
  operator float() const {
    uint32_t bits = static_cast<uint32_t>(x) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};
inline float16::float16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  uint32_t sign = (b >> 16) & 0x8000, mant = b & 0x7FFFFF;
  int32_t exp = static_cast<int32_t>((b >> 23) & 0xFF) - 127 + 15;
  if (((b >> 23) & 0xFF) == 0xFF) { x = static_cast<uint16_t>(sign | 0x7C00 | (mant ? 0x200 : 0)); return; }
  if (exp >= 31) { x = static_cast<uint16_t>(sign | 0x7C00); return; }
  if (exp <= 0) {
    if (exp < -10) { x = static_cast<uint16_t>(sign); return; }
    mant |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift, rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1))) ++half;
    x = static_cast<uint16_t>(sign | half);
    return;
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13), rest = mant & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  x = static_cast<uint16_t>(half);
}
inline float16::operator float() const {
  uint32_t sign = static_cast<uint32_t>(x & 0x8000) << 16, exp = (x >> 10) & 0x1F, mant = x & 0x3FF, bits;
  if (exp == 0) {
    if (mant == 0) { bits = sign; } else {
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) { mant <<= 1; --exp; }
      bits = sign | (exp << 23) | ((mant & 0x3FF) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000 | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
template <typename T>
using complex = std::complex<T>;
}  // namespace dtype

template <typename T> struct DataTypeOf;
#define OARLOCK_DTYPE_OF(CPP, CODE) \
  template <> struct DataTypeOf<CPP> { static constexpr DataType value = DataType::CODE; };
OARLOCK_DTYPE_OF(bool, BOOL)
OARLOCK_DTYPE_OF(int8_t, INT8)
OARLOCK_DTYPE_OF(uint8_t, UINT8)
OARLOCK_DTYPE_OF(int16_t, INT16)
OARLOCK_DTYPE_OF(int32_t, INT32)
OARLOCK_DTYPE_OF(int64_t, INT64)
OARLOCK_DTYPE_OF(dtype::float16, FLOAT16)
OARLOCK_DTYPE_OF(dtype::bfloat16, BFLOAT16)
OARLOCK_DTYPE_OF(float, FLOAT32)
OARLOCK_DTYPE_OF(double, FLOAT64)
OARLOCK_DTYPE_OF(std::complex<float>, COMPLEX64)
OARLOCK_DTYPE_OF(std::complex<double>, COMPLEX128)
#undef OARLOCK_DTYPE_OF

// Memory of one device, from the C ABI (defined once per library in oarlock_op_abi.cc).
void* ext_allocate(size_t bytes, const Place& place);
void ext_free(void* ptr, const Place& place);
void ext_copy(void* dst, const Place& dst_place, const void* src, const Place& src_place, size_t bytes);

// One buffer: borrowed (an input's array, `input_index` >= 0) or owned (allocated here, freed with it).
struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Place place;
  bool owned = false;
  int input_index = -1;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() { if (owned && ptr) ext_free(ptr, place); }
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(const Place& place, const std::vector<int64_t>& shape) : shape_(shape), place_(place) {}
  Tensor(PlaceType place, const std::vector<int64_t>& shape) : shape_(shape), place_(ToPlace(place)) {}
  Tensor(std::shared_ptr<Storage> storage, std::vector<int64_t> shape, DataType dtype, Place place)
      : storage_(std::move(storage)), shape_(std::move(shape)), dtype_(dtype), place_(place) {}

  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& dims() const { return shape_; }
  int64_t numel() const {
    return std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<int64_t>());
  }
  int64_t size() const { return numel(); }
  DataType dtype() const { return dtype_; }
  DataType type() const { return dtype_; }
  const Place& place() const { return place_; }
  bool is_cpu() const { return place_.GetType() == AllocationType::CPU; }
  bool is_gpu() const { return place_.GetType() == AllocationType::GPU; }
  bool is_dense_tensor() const { return true; }
  bool initialized() const { return storage_ && storage_->ptr; }
  bool is_initialized() const { return initialized(); }
  bool defined() const { return static_cast<bool>(storage_) || !shape_.empty(); }
  void reshape(const std::vector<int64_t>& shape) { shape_ = shape; }

  void* data() const { return storage_ ? storage_->ptr : nullptr; }
  template <typename T>
  T* data() const {
    if (storage_ && dtype_ != DataTypeOf<T>::value)
      PD_THROW("Tensor::data<", DataTypeName(DataTypeOf<T>::value), ">() called on a tensor of dtype ",
               DataTypeName(dtype_));
    return static_cast<T*>(data());
  }
  // Allocates (or reallocates when the dtype, size or place changed) and returns the buffer.
  template <typename T>
  T* mutable_data(const Place& place) {
    DataType want = DataTypeOf<T>::value;
    size_t bytes = static_cast<size_t>(numel()) * sizeof(T);
    if (!storage_ || storage_->bytes < bytes || storage_->place != place) {
      auto fresh = std::make_shared<Storage>();
      fresh->bytes = bytes;
      fresh->place = place;
      fresh->owned = true;
      fresh->ptr = ext_allocate(bytes ? bytes : 1, place);
      storage_ = fresh;
    }
    dtype_ = want;
    place_ = place;
    return static_cast<T*>(storage_->ptr);
  }
  template <typename T>
  T* mutable_data() { return mutable_data<T>(place_); }

  Tensor copy_to(const Place& place, bool /*blocking*/ = true) const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  std::vector<int64_t> shape_;
  DataType dtype_ = DataType::UNDEFINED;
  Place place_;
};

// A tensor of `shape` with fresh, uninitialised memory on `place`.
inline Tensor empty(const std::vector<int64_t>& shape, DataType dtype = DataType::FLOAT32,
                    const Place& place = CPUPlace()) {
  if (SizeOf(dtype) == 0) PD_THROW("paddle::empty(): unsupported dtype ", DataTypeName(dtype));
  int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
  auto storage = std::make_shared<Storage>();
  storage->bytes = static_cast<size_t>(n) * SizeOf(dtype);
  storage->place = place;
  storage->owned = true;
  storage->ptr = ext_allocate(storage->bytes ? storage->bytes : 1, place);
  return Tensor(storage, shape, dtype, place);
}

inline Tensor empty_like(const Tensor& x, DataType dtype = DataType::UNDEFINED,
                         const Place& place = Place()) {
  return empty(x.shape(), dtype == DataType::UNDEFINED ? x.dtype() : dtype,
               place.GetType() == AllocationType::UNDEFINED ? x.place() : place);
}

inline Tensor Tensor::copy_to(const Place& place, bool) const {
  Tensor out = empty(shape_, dtype_, place);
  ext_copy(out.data(), place, data(), place_, static_cast<size_t>(numel()) * SizeOf(dtype_));
  return out;
}

namespace ext_detail {
template <typename T>
void fill(Tensor& t, double value) {
  T* p = t.data<T>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = static_cast<T>(static_cast<float>(value));
}
}  // namespace ext_detail

// full/zeros/ones fill on the host; a GPU tensor is filled there and copied over.
inline Tensor full(const std::vector<int64_t>& shape, double value, DataType dtype = DataType::FLOAT32,
                   const Place& place = CPUPlace()) {
  Tensor host = empty(shape, dtype, CPUPlace());
  switch (dtype) {
    case DataType::BOOL: ext_detail::fill<bool>(host, value); break;
    case DataType::INT8: ext_detail::fill<int8_t>(host, value); break;
    case DataType::UINT8: ext_detail::fill<uint8_t>(host, value); break;
    case DataType::INT16: ext_detail::fill<int16_t>(host, value); break;
    case DataType::INT32: ext_detail::fill<int32_t>(host, value); break;
    case DataType::INT64: ext_detail::fill<int64_t>(host, value); break;
    case DataType::FLOAT16: ext_detail::fill<dtype::float16>(host, value); break;
    case DataType::BFLOAT16: ext_detail::fill<dtype::bfloat16>(host, value); break;
    case DataType::FLOAT32: ext_detail::fill<float>(host, value); break;
    case DataType::FLOAT64: ext_detail::fill<double>(host, value); break;
    default: PD_THROW("paddle::full(): unsupported dtype ", DataTypeName(dtype));
  }
  return place.GetType() == AllocationType::CPU ? host : host.copy_to(place);
}
inline Tensor zeros(const std::vector<int64_t>& shape, DataType dtype = DataType::FLOAT32,
                    const Place& place = CPUPlace()) { return full(shape, 0.0, dtype, place); }
inline Tensor ones(const std::vector<int64_t>& shape, DataType dtype = DataType::FLOAT32,
                   const Place& place = CPUPlace()) { return full(shape, 1.0, dtype, place); }

// Paddle's optional input: empty when the caller passed None.
template <typename T>
class optional {
 public:
  optional() = default;
  optional(const T& value) : value_(value), has_(true) {}  // NOLINT
  explicit operator bool() const { return has_; }
  bool is_initialized() const { return has_; }
  const T& get() const { return value_; }
  const T* get_ptr() const { return has_ ? &value_ : nullptr; }
  const T& operator*() const { return value_; }
  const T* operator->() const { return &value_; }

 private:
  T value_;
  bool has_ = false;
};

}  // namespace paddle

namespace phi {
using DataType = ::paddle::DataType;
using Place = ::paddle::Place;
using CPUPlace = ::paddle::CPUPlace;
using GPUPlace = ::paddle::GPUPlace;
using AllocationType = ::paddle::AllocationType;
namespace dtype = ::paddle::dtype;
}  // namespace phi
