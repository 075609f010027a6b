// threaded_comm.cpp — ThreadedComm: non-blocking sums completed by a communication thread.
#include "mnist_ddp/comm/threaded_comm.hpp"

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

class ThreadedComm final : public Comm {
 public:
  explicit ThreadedComm(std::unique_ptr<Comm> inner) : inner_(std::move(inner)) {
    worker_ = std::thread([this] { work(); });
  }
  ~ThreadedComm() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* transport() const override { return "MPI (communication thread)"; }
  bool test(int request) override {
    if (request < 0) return true;
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_[static_cast<std::size_t>(request)].done;
  }
  void wait(int request) override {
    if (request < 0) return;
    std::unique_lock<std::mutex> lock(mu_);
    // Sync: the thread has finished this bucket (its writes to the buffer happen before).
    cv_.wait(lock, [&] { return jobs_[static_cast<std::size_t>(request)].done; });
    // All of a step's requests are waited for before the next step starts new ones.
    if (++waited_ == jobs_.size()) {
      jobs_.clear();
      waited_ = 0;
    }
  }
  void abandon_step() override {
    std::unique_lock<std::mutex> lock(mu_);
    queue_.clear();
    // Sync: the sum the thread is in still writes its buffer; the caller frees it after this.
    cv_.wait(lock, [&] { return !running_; });
    jobs_.clear();
    waited_ = 0;
  }
  void barrier() override { not_here("barrier"); }
  [[noreturn]] void abort(int code) override {
    inner_->abort(code);
    std::abort();  // inner_->abort does not return; this tells the compiler so
  }

 protected:
  int start_allreduce_raw(void* data, std::size_t count, DType type) override {
    MNIST_DDP_CHECK(type == DType::F32 || is_half(type),
                    "the communication thread carries f32 and 16-bit sums only");
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(Job{data, count, type, false});
    queue_.push_back(jobs_.size() - 1);
    cv_.notify_all();
    return static_cast<int>(jobs_.size() - 1);
  }
  void allreduce_raw(void*, std::size_t, DType, ReduceOp) override { not_here("allreduce"); }
  void broadcast_raw(void*, std::size_t, DType, int) override { not_here("broadcast"); }
  void allgather_raw(const void*, void*, std::size_t, DType) override { not_here("allgather"); }

 private:
  struct Job {
    void* data;
    std::size_t count;
    DType type;
    bool done;
  };
  [[noreturn]] static void not_here(const char* op) {
    fail_internal(std::string("the communication thread's communicator carries only the gradient "
                              "sums, not ") +
                      op,
                  __FILE__, __LINE__);
  }
  // The thread: each queued sum, in the order started, as a blocking collective on inner_.
  void work() {
    for (;;) {
      Job job{};
      std::size_t index = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        index = queue_.front();
        queue_.pop_front();
        job = jobs_[index];
        running_ = true;
      }
      if (job.type == DType::F32) {
        // Collective (communication thread, its own communicator): this bucket's sum.
        inner_->allreduce(std::span<float>(static_cast<float*>(job.data), job.count),
                          ReduceOp::Sum);
      } else {
        // Collective (communication thread): the 16-bit sum of the hook's encoding.
        inner_->wait(inner_->start_allreduce_sum(
            std::span<std::uint16_t>(static_cast<std::uint16_t*>(job.data), job.count), job.type));
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        jobs_[index].done = true;
        running_ = false;
      }
      cv_.notify_all();
    }
  }

  std::unique_ptr<Comm> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Job> jobs_;          // this step's sums, by request
  std::deque<std::size_t> queue_;  // started, not yet taken by the thread
  std::size_t waited_ = 0;
  bool running_ = false;  // the thread is inside a sum
  bool stop_ = false;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace

std::unique_ptr<Comm> make_threaded_comm(std::unique_ptr<Comm> inner) {
  return std::make_unique<ThreadedComm>(std::move(inner));
}

}  // namespace mnist_ddp
