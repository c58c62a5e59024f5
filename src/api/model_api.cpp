// SPDX-License-Identifier: Apache-2.0
// The sparrowModel* entry points: validate, convert to model::LocalTensor, call model::Model.
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "api/handle.h"
#include "collectives/bcast.h"
#include "kernels/device.h"
#include "model/model.h"

#define SPARROW_EXPORT __attribute__((visibility("default")))

struct sparrowModel {
  sparrowComm* comm;
  std::unique_ptr<sparrow::model::Model> impl;
  std::vector<const void*> device_tensors;  // local tensors in device memory (synchronised first)
};

using namespace sparrow::api;

namespace {

std::mutex g_models_mu;
std::set<const sparrowModel*> g_models;

bool live_model(const sparrowModel* m) {
  std::lock_guard<std::mutex> lk(g_models_mu);
  return m && g_models.count(m);
}

sparrow::Status dead_model(const char* fn, const void* m) {
  return sparrow::Error(sparrow::Code::kInvalidUsage,
                        std::string(fn) + (m ? ": the model was destroyed (or is not one sparrowModelCreate made)"
                                             : ": model is NULL"));
}

sparrow::Result<sparrow::model::Piece> to_piece(const sparrowPiece_t& p, const std::string& where) {
  if (!p.logical) return sparrow::InvalidArgument(where + ": a piece's logical name is NULL");
  return sparrow::model::Piece{std::string(p.logical, strnlen(p.logical, 1025)), p.dim, p.start, p.stop, p.offset};
}

sparrow::Result<sparrow::model::LocalTensor> to_local(const sparrowTensor_t& t, int i) {
  const std::string where = "sparrowModelCreate: tensors[" + std::to_string(i) + "]";
  if (!t.name) return sparrow::InvalidArgument(where + ": name is NULL");
  if (int(t.datatype) < 0 || int(t.datatype) > 9)
    return sparrow::InvalidArgument(where + ": unknown datatype " + std::to_string(int(t.datatype)));
  if (t.ndim < 0 || t.ndim > 16) return sparrow::InvalidArgument(where + ": ndim must be 0..16");
  if (t.ndim > 0 && !t.shape) return sparrow::InvalidArgument(where + ": shape is NULL");
  if (t.npieces < 0 || (t.npieces > 0 && !t.pieces))
    return sparrow::InvalidArgument(where + ": pieces is NULL or npieces negative");
  sparrow::model::LocalTensor out;
  out.name.assign(t.name, strnlen(t.name, 1025));
  out.data = t.data;
  out.dtype = uint8_t(t.datatype);
  out.shape.assign(t.shape, t.shape + t.ndim);
  for (int k = 0; k < t.npieces; ++k) {
    SPARROW_ASSIGN_OR_RETURN(auto p, to_piece(t.pieces[k], where));
    out.pieces.push_back(std::move(p));
  }
  return out;
}

// Device memory among the tensors (whole or with pieces): the step starts after the work queued on the
// device, so that what it reads (a source's rows, a receiver's pieces) is what the caller wrote.
sparrow::Status sync_device(const sparrowModel* m) {
  auto* dev = sparrow::kernels::device_ops();
  if (!dev || m->device_tensors.empty()) return sparrow::Status::Ok();
  return sparrow::kernels::device_error(dev, dev->sync_stream(nullptr), "waiting for the device");
}

// Runs `f(model)` with the model and its communicator held live.
template <class F>
sparrowResult_t with_model(sparrowModel* m, const char* fn, F&& f) {
  if (!live_model(m)) return fail(dead_model(fn, m));
  Pin pin(m->comm);
  if (!pin) return fail(dead_handle(fn, m->comm));
  sparrow::Status s = no_throw(fn, [&] { return f(*m->impl); });
  if (!s.ok()) return fail(s, m->comm);
  return sparrowSuccess;
}

}  // namespace

extern "C" {

SPARROW_EXPORT sparrowResult_t sparrowModelCreate(sparrowModel_t* model, sparrowComm_t comm,
                                                  const sparrowTensor_t* tensors, int ntensors, int root) {
  return sparrowModelCreateSharded(model, comm, tensors, ntensors, root, nullptr, 0);
}

SPARROW_EXPORT sparrowResult_t sparrowModelCreateSharded(sparrowModel_t* model, sparrowComm_t comm,
                                                         const sparrowTensor_t* tensors, int ntensors, int root,
                                                         const int* sources, int nsources) {
  if (!model) return invalid("sparrowModelCreate: model is NULL");
  if (nsources < 0 || (nsources > 0 && !sources)) return invalid("sparrowModelCreate: sources is NULL or nsources negative");
  *model = nullptr;
  if (ntensors < 0 || (ntensors > 0 && !tensors)) return invalid("sparrowModelCreate: tensors is NULL or ntensors negative");
  Pin pin(comm);
  if (!pin) return fail(dead_handle("sparrowModelCreate", comm));
  std::vector<sparrow::model::LocalTensor> locals;
  auto* dev = sparrow::kernels::device_ops();
  std::vector<const void*> device_tensors;
  for (int i = 0; i < ntensors; ++i) {
    auto t = to_local(tensors[i], i);
    if (!t.ok()) return fail(t.status(), comm);
    if (sparrow::kernels::is_device(dev, t->data)) device_tensors.push_back(t->data);
    locals.push_back(std::move(*t));
  }
  sparrow::Result<std::unique_ptr<sparrow::model::Model>> made = sparrow::InternalError("not run");
  sparrow::Status s = no_throw("sparrowModelCreate", [&] {
    made = sparrow::model::Model::create(*comm->coll, std::move(locals), root,
                                         std::vector<int>(sources, sources + nsources));
    return made.status();
  });
  if (!s.ok()) return fail(sparrow::Status(s.code(), "sparrowModelCreate: " + s.message()), comm);
  auto* m = new sparrowModel{comm, std::move(made.value()), std::move(device_tensors)};
  std::lock_guard<std::mutex> lk(g_models_mu);
  g_models.insert(m);
  *model = m;
  return sparrowSuccess;
}

SPARROW_EXPORT sparrowResult_t sparrowModelSync(sparrowModel_t model) {
  return with_model(model, "sparrowModelSync", [&](sparrow::model::Model& m) {
    SPARROW_RETURN_IF_ERROR(sync_device(model));
    return m.step();
  });
}

SPARROW_EXPORT sparrowResult_t sparrowModelStage(sparrowModel_t model) {
  return with_model(model, "sparrowModelStage", [&](sparrow::model::Model& m) {
    SPARROW_RETURN_IF_ERROR(sync_device(model));
    return m.stage();
  });
}

SPARROW_EXPORT sparrowResult_t sparrowModelCommit(sparrowModel_t model) {
  return with_model(model, "sparrowModelCommit", [](sparrow::model::Model& m) { return m.commit(); });
}

SPARROW_EXPORT sparrowResult_t sparrowModelGetVersion(sparrowModel_t model, unsigned long long* version) {
  if (!version) return invalid("sparrowModelGetVersion: version is NULL");
  return with_model(model, "sparrowModelGetVersion", [&](sparrow::model::Model& m) {
    *version = m.version();
    return sparrow::Status::Ok();
  });
}

SPARROW_EXPORT sparrowResult_t sparrowModelGetDigest(sparrowModel_t model, const char* logical,
                                                     unsigned long long* digest) {
  if (!logical || !digest) return invalid("sparrowModelGetDigest: NULL argument");
  return with_model(model, "sparrowModelGetDigest", [&](sparrow::model::Model& m) {
    SPARROW_ASSIGN_OR_RETURN(uint64_t d, m.digest(std::string(logical, strnlen(logical, 1025))));
    *digest = d;
    return sparrow::Status::Ok();
  });
}

SPARROW_EXPORT sparrowResult_t sparrowModelGetDigestRows(sparrowModel_t model, const char* logical,
                                                         unsigned long long start, unsigned long long stop,
                                                         unsigned long long* digest) {
  if (!logical || !digest) return invalid("sparrowModelGetDigestRows: NULL argument");
  return with_model(model, "sparrowModelGetDigestRows", [&](sparrow::model::Model& m) {
    SPARROW_ASSIGN_OR_RETURN(uint64_t d, m.digest_rows(std::string(logical, strnlen(logical, 1025)), start, stop));
    *digest = d;
    return sparrow::Status::Ok();
  });
}

SPARROW_EXPORT sparrowResult_t sparrowModelDestroy(sparrowModel_t model) {
  {
    std::lock_guard<std::mutex> lk(g_models_mu);
    if (!model || !g_models.erase(model)) return fail(dead_model("sparrowModelDestroy", model));
  }
  Pin pin(model->comm);
  if (pin) model->impl->forget();  // its buffers' state: a later model on the same memory starts afresh
  delete model;
  return sparrowSuccess;
}

}  // extern "C"
