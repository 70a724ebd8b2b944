#include "runtime/engine_channel.h"

namespace dsv4 {

void EngineSignal::notify() {
  {
    std::lock_guard<std::mutex> lk(mu);
    dirty = true;
  }
  cv.notify_all();
}

std::vector<EngineEvent> RequestChannel::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !events_.empty(); });
  std::vector<EngineEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  for (const auto& e : out)
    if (e.final()) done_ = true;
  return out;
}

void RequestChannel::cancel() {
  if (cancelled_.exchange(true)) return;
  signal_->notify();
}

void RequestChannel::push(EngineEvent e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

}  // namespace dsv4
