#include "xla_ext/engines/mp/solvers.h"

#include "xla_ext/common/dtypes.h"
#include "xla_ext/vendor/cuda_types.h"

#include <algorithm>
#include <complex>
#include <cstring>
#include <map>
#include <memory>

namespace jaxmg::mp {
namespace {

const cusolvermp::Api& mp() { return cusolvermp::api(); }
const cuda::Api& rt() { return cuda::api(); }

template <typename T>
cudaDataType TypeOf() {
  return cuda::kType<T>;
}

std::mutex g_mu;

// One cuSOLVERMp handle per GPU per process (the library allows no more).
Status HandleOf(int32_t device, cudaStream_t stream, cusolverMpHandle_t* out) {
  static auto* handles = new std::map<int32_t, cusolverMpHandle_t>();
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = handles->find(device);
  if (it == handles->end()) {
    cuda::DeviceGuard guard;
    JAXMG_CUDA(rt().cudaSetDevice(device));
    cusolverMpHandle_t handle = nullptr;
    JAXMG_CUSOLVER(mp().cusolverMpCreate(&handle, device, stream));
    it = handles->emplace(device, handle).first;
  }
  *out = it->second;
  return Status::Ok();
}

Status ParseId(const std::string& hex, ncclUniqueId* id) {
  if (hex.size() != 2 * sizeof(id->internal)) {
    return Errorf("jaxmg: NCCL id must be ", 2 * sizeof(id->internal), " hex digits, got ",
                  hex.size());
  }
  for (size_t i = 0; i < sizeof(id->internal); ++i) {
    id->internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return Status::Ok();
}

struct Group {
  std::vector<std::unique_ptr<Rank>> ranks;
};

// Creates the communicators of every rank this process hosts at once: NCCL
// wants a process's ranks of one communicator initialised in one group.
Status InitGroup(const GroupSpec& spec, Group* group) {
  ncclUniqueId id;
  JAXMG_RETURN_IF_ERROR(ParseId(spec.id, &id));
  if (spec.local_ranks.size() != spec.local_devices.size() || spec.local_ranks.empty()) {
    return Status::Error("jaxmg: a cuSOLVERMp call needs one GPU per local rank");
  }
  for (size_t i = 0; i < spec.local_ranks.size(); ++i) {
    auto rank = std::make_unique<Rank>();
    rank->rank = spec.local_ranks[i];
    rank->n_ranks = spec.n_ranks;
    rank->device = spec.local_devices[i];
    group->ranks.push_back(std::move(rank));
  }
  cuda::DeviceGuard guard;
  JAXMG_NCCL(mp().ncclGroupStart());
  for (auto& rank : group->ranks) {
    JAXMG_CUDA(rt().cudaSetDevice(rank->device));
    JAXMG_NCCL(mp().ncclCommInitRank(&rank->comm, spec.n_ranks, id, rank->rank));
  }
  JAXMG_NCCL(mp().ncclGroupEnd());
  return Status::Ok();
}

// ScaLAPACK's numroc: how many of n indices, dealt in blocks of nb from
// process 0, process `proc` of `procs` owns.
int64_t NumRoc(int64_t n, int64_t nb, int64_t proc, int64_t procs) {
  const int64_t whole_blocks = n / nb;
  int64_t count = (whole_blocks / procs) * nb;
  const int64_t extra_blocks = whole_blocks % procs;
  if (proc < extra_blocks) {
    count += nb;
  } else if (proc == extra_blocks) {
    count += n % nb;  // the trailing partial block
  }
  return count;
}

int64_t LocalRows(const Grid& g, int64_t m, int64_t mb) {
  return std::max<int64_t>(NumRoc(m, mb, g.row, g.rows), 1);
}

int64_t LocalCols(const Grid& g, int64_t n, int64_t nb) { return NumRoc(n, nb, g.col, g.cols); }

class Desc {
 public:
  Desc() = default;
  Desc(const Desc&) = delete;
  ~Desc() {
    if (d_) mp().cusolverMpDestroyMatrixDesc(d_);
  }
  // m x n on the grid in mb x nb blocks, leading dimension the rank's local rows.
  Status Init(const Grid& g, cudaDataType type, int64_t m, int64_t n, int64_t mb, int64_t nb) {
    JAXMG_CUSOLVER(mp().cusolverMpCreateMatrixDesc(&d_, g.handle, type, m, n, mb, nb, 0, 0,
                                                   LocalRows(g, m, mb)));
    return Status::Ok();
  }
  cusolverMpMatrixDescriptor_t get() const { return d_; }

 private:
  cusolverMpMatrixDescriptor_t d_ = nullptr;
};

struct Work {
  void* device = nullptr;
  size_t device_bytes = 0;
  void* host = nullptr;
  size_t host_bytes = 0;
};

Status Take(Rank& r, size_t device_bytes, size_t host_bytes, const Allocator& alloc, Work* w) {
  w->device_bytes = device_bytes;
  JAXMG_RETURN_IF_ERROR(alloc(std::max<size_t>(device_bytes, 256), &w->device));
  if (r.host_work.size() < std::max<size_t>(host_bytes, 1)) {
    r.host_work.resize(std::max<size_t>(host_bytes, 1));
  }
  w->host = r.host_work.data();
  w->host_bytes = host_bytes;
  return Status::Ok();
}

Status Ints(int64_t count, size_t each, const Allocator& alloc, void** out) {
  return alloc(std::max<size_t>(count * each, 256), out);
}

// Sets the handle to this call's stream; the rank's device is current.
Status Begin(Rank& r, cudaStream_t stream) {
  JAXMG_CUDA(rt().cudaSetDevice(r.device));
  JAXMG_CUSOLVER(mp().cusolverMpSetStream(r.handle, stream));
  return Status::Ok();
}

// Not every routine writes info on success (0.8's geqrf leaves it alone).
Status ClearInfo(int32_t* info, cudaStream_t stream) {
  JAXMG_CUDA(rt().cudaMemsetAsync(info, 0, sizeof(int32_t), stream));
  return Status::Ok();
}

char kVectors[] = "V";

}  // namespace

Status GetRank(const GroupSpec& spec, int32_t device, cudaStream_t stream, Rank** out) {
  static auto* groups = new std::map<std::string, std::unique_ptr<Group>>();
  Rank* rank = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = groups->find(spec.id);
    if (it == groups->end()) {
      auto group = std::make_unique<Group>();
      JAXMG_RETURN_IF_ERROR(InitGroup(spec, group.get()));
      it = groups->emplace(spec.id, std::move(group)).first;
    }
    for (auto& r : it->second->ranks) {
      if (r->device == device) rank = r.get();
    }
  }
  if (rank == nullptr) {
    return Errorf("jaxmg: GPU ", device, " runs a cuSOLVERMp call but hosts none of its ranks");
  }
  std::call_once(rank->ready, [&] {
    rank->ready_status = [&]() -> Status {
      return HandleOf(device, stream, &rank->handle);
    }();
  });
  JAXMG_RETURN_IF_ERROR(rank->ready_status);
  *out = rank;
  return Status::Ok();
}

Status GridOf(Rank& r, int32_t rows, int32_t cols, Grid* out) {
  if (rows < 1 || cols < 1 || rows * cols != r.n_ranks) {
    return Errorf("jaxmg: a ", rows, " x ", cols, " grid does not hold the communicator's ",
                  r.n_ranks, " ranks");
  }
  std::lock_guard<std::mutex> lock(r.grids_mu);
  auto it = r.grids.find({rows, cols});
  if (it == r.grids.end()) {
    cusolverMpGrid_t grid = nullptr;
    cuda::DeviceGuard guard;
    JAXMG_CUDA(rt().cudaSetDevice(r.device));
    JAXMG_CUSOLVER(mp().cusolverMpCreateDeviceGrid(r.handle, &grid, r.comm, rows, cols,
                                                   CUSOLVERMP_GRID_MAPPING_COL_MAJOR));
    it = r.grids.emplace(std::make_pair(rows, cols), grid).first;
  }
  out->rows = rows;
  out->cols = cols;
  out->row = r.rank % rows;
  out->col = r.rank / rows;
  out->handle = it->second;
  return Status::Ok();
}

Status Version(int32_t device, cudaStream_t stream, int* version) {
  cusolverMpHandle_t handle = nullptr;
  JAXMG_RETURN_IF_ERROR(HandleOf(device, stream, &handle));
  JAXMG_CUSOLVER(mp().cusolverMpGetVersion(handle, version));
  return Status::Ok();
}

template <typename T>
Status Potrf(Rank& r, const Grid& g, cudaStream_t stream, int64_t n, int64_t block, T* a,
             int32_t* info, const Allocator& alloc) {
  cuda::DeviceGuard guard;
  JAXMG_RETURN_IF_ERROR(Begin(r, stream));
  JAXMG_RETURN_IF_ERROR(ClearInfo(info, stream));
  const cudaDataType type = TypeOf<T>();
  Desc da;
  JAXMG_RETURN_IF_ERROR(da.Init(g, type, n, n, block, block));
  size_t dw = 0, hw = 0;
  JAXMG_CUSOLVER(mp().cusolverMpPotrf_bufferSize(r.handle, CUBLAS_FILL_MODE_LOWER, n, a, 1, 1,
                                                 da.get(), type, &dw, &hw));
  Work w;
  JAXMG_RETURN_IF_ERROR(Take(r, dw, hw, alloc, &w));
  const cusolverStatus_t status =
      mp().cusolverMpPotrf(r.handle, CUBLAS_FILL_MODE_LOWER, n, a, 1, 1, da.get(), type,
                           w.device, w.device_bytes, w.host, w.host_bytes, info);
  if (status == CUSOLVER_STATUS_SUCCESS) return Status::Ok();
  // cuSOLVERMp 0.8 fails the call on a matrix that is not positive definite;
  // with info set that is the caller's NaN-and-info case, not an error.
  int32_t found = 0;
  JAXMG_CUDA(rt().cudaStreamSynchronize(stream));
  JAXMG_CUDA(rt().cudaMemcpy(&found, info, sizeof(found), cudaMemcpyDeviceToHost));
  if (found > 0) return Status::Ok();
  return cuda::CusolverError(status, "cusolverMpPotrf", __FILE__, __LINE__);
}

// cuSOLVERMp's potrs and getrs take one right-hand side at a time.
template <typename T, typename Solve>
Status EachColumn(const Grid& g, int64_t n, int64_t block, T* xt, int64_t k, Solve&& solve) {
  Desc db;
  JAXMG_RETURN_IF_ERROR(db.Init(g, TypeOf<T>(), n, 1, block, block));
  const int64_t ld = LocalRows(g, n, block);
  for (int64_t j = 0; j < k; ++j) JAXMG_RETURN_IF_ERROR(solve(xt + j * ld, db.get()));
  return Status::Ok();
}

template <typename T>
Status Potrs(Rank& r, const Grid& g, cudaStream_t stream, int64_t n, int64_t block,
             const T* factor, T* xt, int64_t k, const Allocator& alloc) {
  cuda::DeviceGuard guard;
  JAXMG_RETURN_IF_ERROR(Begin(r, stream));
  const cudaDataType type = TypeOf<T>();
  Desc da;
  JAXMG_RETURN_IF_ERROR(da.Init(g, type, n, n, block, block));
  void* info = nullptr;
  JAXMG_RETURN_IF_ERROR(Ints(1, sizeof(int), alloc, &info));
  Work w;
  bool sized = false;
  return EachColumn(g, n, block, xt, k, [&](T* b, cusolverMpMatrixDescriptor_t db) {
    if (!sized) {
      size_t dw = 0, hw = 0;
      JAXMG_CUSOLVER(mp().cusolverMpPotrs_bufferSize(r.handle, CUBLAS_FILL_MODE_LOWER, n, 1,
                                                     factor, 1, 1, da.get(), b, 1, 1, db, type,
                                                     &dw, &hw));
      JAXMG_RETURN_IF_ERROR(Take(r, dw, hw, alloc, &w));
      sized = true;
    }
    JAXMG_CUSOLVER(mp().cusolverMpPotrs(r.handle, CUBLAS_FILL_MODE_LOWER, n, 1, factor, 1, 1,
                                        da.get(), b, 1, 1, db, type, w.device, w.device_bytes,
                                        w.host, w.host_bytes, static_cast<int*>(info)));
    return Status::Ok();
  });
}

template <typename T>
Status Getrf(Rank& r, const Grid& g, cudaStream_t stream, int64_t n, int64_t block, T* a,
             int32_t* piv, int32_t* info, const Allocator& alloc) {
  cuda::DeviceGuard guard;
  JAXMG_RETURN_IF_ERROR(Begin(r, stream));
  JAXMG_RETURN_IF_ERROR(ClearInfo(info, stream));
  const cudaDataType type = TypeOf<T>();
  Desc da;
  JAXMG_RETURN_IF_ERROR(da.Init(g, type, n, n, block, block));
  // cuSOLVERMp keeps a pivot per local column (of the panels this rank's
  // grid column factors), not per local row as ScaLAPACK does.
  const int64_t cols = LocalCols(g, n, block);
  // Room for ScaLAPACK's per-row layout too, should a version go back to it.
  const int64_t room = std::max(cols, LocalRows(g, n, block)) + block;
  void* ipiv = nullptr;
  JAXMG_RETURN_IF_ERROR(Ints(room, sizeof(int64_t), alloc, &ipiv));
  size_t dw = 0, hw = 0;
  JAXMG_CUSOLVER(mp().cusolverMpGetrf_bufferSize(r.handle, n, n, a, 1, 1, da.get(),
                                                 static_cast<int64_t*>(ipiv), type, &dw, &hw));
  Work w;
  JAXMG_RETURN_IF_ERROR(Take(r, dw, hw, alloc, &w));
  JAXMG_CUSOLVER(mp().cusolverMpGetrf(r.handle, n, n, a, 1, 1, da.get(),
                                      static_cast<int64_t*>(ipiv), type, w.device,
                                      w.device_bytes, w.host, w.host_bytes, info));
  // The low words of the int64 pivots (little-endian), as int32.
  if (cols > 0) {
    JAXMG_CUDA(rt().cudaMemcpy2DAsync(piv, sizeof(int32_t), ipiv, sizeof(int64_t),
                                      sizeof(int32_t), cols, cudaMemcpyDeviceToDevice, stream));
  }
  return Status::Ok();
}

template <typename T>
Status Getrs(Rank& r, const Grid& g, cudaStream_t stream, int64_t n, int64_t block, const T* lu,
             const int32_t* piv, T* xt, int64_t k, const Allocator& alloc) {
  cuda::DeviceGuard guard;
  JAXMG_RETURN_IF_ERROR(Begin(r, stream));
  const cudaDataType type = TypeOf<T>();
  Desc da;
  JAXMG_RETURN_IF_ERROR(da.Init(g, type, n, n, block, block));
  const int64_t cols = LocalCols(g, n, block);
  const int64_t room = std::max(cols, LocalRows(g, n, block)) + block;
  void* ipiv = nullptr;
  void* info = nullptr;
  JAXMG_RETURN_IF_ERROR(Ints(room, sizeof(int64_t), alloc, &ipiv));
  JAXMG_RETURN_IF_ERROR(Ints(1, sizeof(int), alloc, &info));
  JAXMG_CUDA(rt().cudaMemsetAsync(ipiv, 0, room * sizeof(int64_t), stream));
  if (cols > 0) {
    JAXMG_CUDA(rt().cudaMemcpy2DAsync(ipiv, sizeof(int64_t), piv, sizeof(int32_t),
                                      sizeof(int32_t), cols, cudaMemcpyDeviceToDevice, stream));
  }
  const auto* pivots = static_cast<const int64_t*>(ipiv);
  Work w;
  bool sized = false;
  return EachColumn(g, n, block, xt, k, [&](T* b, cusolverMpMatrixDescriptor_t db) {
    if (!sized) {
      size_t dw = 0, hw = 0;
      JAXMG_CUSOLVER(mp().cusolverMpGetrs_bufferSize(r.handle, CUBLAS_OP_N, n, 1, lu, 1, 1,
                                                     da.get(), pivots, b, 1, 1, db, type, &dw,
                                                     &hw));
      JAXMG_RETURN_IF_ERROR(Take(r, dw, hw, alloc, &w));
      sized = true;
    }
    JAXMG_CUSOLVER(mp().cusolverMpGetrs(r.handle, CUBLAS_OP_N, n, 1, lu, 1, 1, da.get(), pivots,
                                        b, 1, 1, db, type, w.device, w.device_bytes, w.host,
                                        w.host_bytes, static_cast<int*>(info)));
    return Status::Ok();
  });
}

template <typename T>
Status Syevd(Rank& r, const Grid& g, cudaStream_t stream, int64_t n, int64_t block, T* a, T* q,
             Real<T>* w, int32_t* info, const Allocator& alloc) {
  cuda::DeviceGuard guard;
  JAXMG_RETURN_IF_ERROR(Begin(r, stream));
  JAXMG_RETURN_IF_ERROR(ClearInfo(info, stream));
  const cudaDataType type = TypeOf<T>();
  Desc da, dq;
  JAXMG_RETURN_IF_ERROR(da.Init(g, type, n, n, block, block));
  JAXMG_RETURN_IF_ERROR(dq.Init(g, type, n, n, block, block));
  size_t dw = 0, hw = 0;
  // cuSOLVERMp 0.8 computes vectors always ("N" is refused at run time).
  JAXMG_CUSOLVER(mp().cusolverMpSyevd_bufferSize(r.handle, kVectors, CUBLAS_FILL_MODE_LOWER, n,
                                                 a, 1, 1, da.get(), w, q, 1, 1, dq.get(), type,
                                                 &dw, &hw));
  Work work;
  JAXMG_RETURN_IF_ERROR(Take(r, dw, hw, alloc, &work));
  JAXMG_CUSOLVER(mp().cusolverMpSyevd(r.handle, kVectors, CUBLAS_FILL_MODE_LOWER, n, a, 1, 1,
                                      da.get(), w, q, 1, 1, dq.get(), type, work.device,
                                      work.device_bytes, work.host, work.host_bytes, info));
  return Status::Ok();
}

template <typename T>
Status Qr(Rank& r, const Grid& g, cudaStream_t stream, int64_t m, int64_t n, int64_t block, T* a,
          T* r_out, int32_t* info, const Allocator& alloc) {
  cuda::DeviceGuard guard;
  JAXMG_RETURN_IF_ERROR(Begin(r, stream));
  JAXMG_RETURN_IF_ERROR(ClearInfo(info, stream));
  const cudaDataType type = TypeOf<T>();
  Desc da;
  JAXMG_RETURN_IF_ERROR(da.Init(g, type, m, n, block, block));
  const int64_t local_cols = LocalCols(g, n, block);
  void* tau = nullptr;
  void* info2 = nullptr;
  JAXMG_RETURN_IF_ERROR(Ints(std::max<int64_t>(local_cols, 1), sizeof(T), alloc, &tau));
  JAXMG_RETURN_IF_ERROR(Ints(1, sizeof(int), alloc, &info2));
  size_t dw = 0, hw = 0, dw2 = 0, hw2 = 0;
  JAXMG_CUSOLVER(mp().cusolverMpGeqrf_bufferSize(r.handle, m, n, a, 1, 1, da.get(), type, &dw,
                                                 &hw));
  JAXMG_CUSOLVER(mp().cusolverMpOrgqr_bufferSize(r.handle, m, n, n, a, 1, 1, da.get(), tau, type,
                                                 &dw2, &hw2));
  Work w;
  JAXMG_RETURN_IF_ERROR(Take(r, std::max(dw, dw2), std::max(hw, hw2), alloc, &w));
  JAXMG_CUSOLVER(mp().cusolverMpGeqrf(r.handle, m, n, a, 1, 1, da.get(), tau, type, w.device,
                                      w.device_bytes, w.host, w.host_bytes, info));
  // The first N global rows are the first local rows of every rank's matrix.
  const int64_t r_rows = NumRoc(n, block, g.row, g.rows);
  if (local_cols > 0 && r_rows > 0) {
    JAXMG_CUDA(rt().cudaMemcpy2DAsync(r_out, r_rows * sizeof(T), a,
                                      LocalRows(g, m, block) * sizeof(T), r_rows * sizeof(T),
                                      local_cols, cudaMemcpyDeviceToDevice, stream));
  }
  JAXMG_CUSOLVER(mp().cusolverMpOrgqr(r.handle, m, n, n, a, 1, 1, da.get(), tau, type, w.device,
                                      w.device_bytes, w.host, w.host_bytes,
                                      static_cast<int*>(info2)));
  return Status::Ok();
}

#define JAXMG_INSTANTIATE(prefix, name, T, ...)                                                                    \
  template Status Potrf<T>(Rank&, const Grid&, cudaStream_t, int64_t, int64_t, T*, int32_t*,    \
                           const Allocator&);                                                   \
  template Status Potrs<T>(Rank&, const Grid&, cudaStream_t, int64_t, int64_t, const T*, T*,    \
                           int64_t, const Allocator&);                                          \
  template Status Getrf<T>(Rank&, const Grid&, cudaStream_t, int64_t, int64_t, T*, int32_t*,    \
                           int32_t*, const Allocator&);                                         \
  template Status Getrs<T>(Rank&, const Grid&, cudaStream_t, int64_t, int64_t, const T*,        \
                           const int32_t*, T*, int64_t, const Allocator&);                      \
  template Status Syevd<T>(Rank&, const Grid&, cudaStream_t, int64_t, int64_t, T*, T*, Real<T>*,\
                           int32_t*, const Allocator&);                                         \
  template Status Qr<T>(Rank&, const Grid&, cudaStream_t, int64_t, int64_t, int64_t, T*, T*,    \
                        int32_t*, const Allocator&);

JAXMG_FOR_EACH_DTYPE(JAXMG_INSTANTIATE)
#undef JAXMG_INSTANTIATE

}  // namespace jaxmg::mp
