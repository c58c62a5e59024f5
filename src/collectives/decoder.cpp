#include "collectives/decoder.h"

#include <algorithm>

#include "core/affinity.h"
#include "core/parallel.h"

namespace sparrow::coll {

namespace {
constexpr int kMaxThreads = 8;  // beyond this the receiver's memory bandwidth, not cores, limits decoding
}  // namespace

DecodeWorker::~DecodeWorker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::unique_ptr<DecodeWorker::Job> DecodeWorker::start(kernels::cpu::ApplySession* sess, int parent) {
  auto j = std::make_unique<Job>();
  j->w_ = this;
  j->sess_ = sess;
  j->parent_ = parent;
  std::lock_guard<std::mutex> lk(mu_);
  if (sess && threads_.empty()) {
    const int n = std::clamp(kernel_threads(), 1, kMaxThreads);
    for (int i = 0; i < n; ++i) threads_.push_back(affinity::thread([this] { run(); }));
  }
  return j;
}

void DecodeWorker::Job::push(Frame f) {
  if (!sess_) return;
  if (!begun_) {  // the header: checked here, so that every chunk queued after it may start at once
    begun_ = true;
    Status s = sess_->begin(*f);
    std::lock_guard<std::mutex> lk(w_->mu_);
    queued_++;
    done_++;
    if (!s.ok()) status_ = std::move(s);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(w_->mu_);
    queued_++;
    w_->q_.emplace_back(this, std::move(f));
  }
  w_->cv_.notify_one();
}

Status DecodeWorker::Job::join() {
  if (!w_) return status_;
  std::unique_lock<std::mutex> lk(w_->mu_);
  // Decoding is CPU work on frames already here: it always ends (no network wait behind it).
  w_->done_cv_.wait(lk, [&] { return done_ == queued_; });
  return status_;
}

uint32_t DecodeWorker::Job::verified() const {
  std::lock_guard<std::mutex> lk(w_->mu_);
  return status_.ok() ? done_ : 0;
}

void DecodeWorker::decode(Job& j, const Frame& f) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!j.status_.ok()) return;  // drain: the first failure stands
  }
  Status s = j.sess_->add_chunk(f);
  if (!s.ok()) s.context("from rank " + std::to_string(j.parent_));
  std::lock_guard<std::mutex> lk(mu_);
  if (!s.ok() && j.status_.ok()) j.status_ = std::move(s);
}

void DecodeWorker::run() {
  while (true) {
    std::pair<Job*, Frame> item;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return !q_.empty() || stop_; });
      if (q_.empty()) return;
      item = std::move(q_.front());
      q_.pop_front();
    }
    decode(*item.first, item.second);
    {
      std::lock_guard<std::mutex> lk(mu_);
      item.first->done_++;
    }
    done_cv_.notify_all();
  }
}

}  // namespace sparrow::coll
