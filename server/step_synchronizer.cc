#include "server/step_synchronizer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/for_each_part.h"

namespace embedps::server {

StepSynchronizer::StepSynchronizer(Mode mode, uint32_t staleness,
                                   int32_t num_workers, absl::Duration timeout,
                                   embedding::Table* table,
                                   int32_t apply_threads)
    : mode_(mode),
      staleness_(staleness),
      num_workers_(num_workers),
      timeout_(timeout),
      table_(table),
      dim_(table->spec().dim),
      apply_threads_(std::max(1, apply_threads)) {}

bool StepSynchronizer::CountPart(WorkerProgress& progress,
                                 uint32_t parts_in_step) {
  ++progress.parts_received;
  if (parts_in_step > 0) progress.parts_expected = parts_in_step;
  return progress.parts_expected > 0 &&
         progress.parts_received == progress.parts_expected;
}

int32_t StepSynchronizer::WorkersPast(uint64_t step) const {
  int32_t past = 0;
  for (const auto& [client, through] : ssp_completed_through_) {
    if (through > step) ++past;
  }
  return past;
}

absl::Status StepSynchronizer::AwaitPullable(uint64_t step) {
  MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout_;
  if (mode_ == Mode::kSync) {
    if (!started_) {
      started_ = true;
      next_step_ = step;
    }
    if (!progressed_.WaitUntil(&mu_, deadline,
                               [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                 return next_step_ >= step;
                               })) {
      const auto it = pending_.find(next_step_);
      const int32_t done =
          it == pending_.end() ? 0 : it->second.completed_workers;
      return absl::DeadlineExceededError(absl::StrCat(
          "Pull for step ", step, " of table '", table_->spec().name,
          "' waited ", absl::FormatDuration(timeout_), " for step ", next_step_,
          " to be applied; ", done, " of ", num_workers_,
          " workers have pushed it (a worker is slow, stuck or gone)"));
    }
    return absl::OkStatus();
  }
  if (step <= staleness_) return absl::OkStatus();
  const uint64_t must_be_done = step - staleness_ - 1;
  if (!progressed_.WaitUntil(&mu_, deadline,
                             [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
                               return WorkersPast(must_be_done) >= num_workers_;
                             })) {
    return absl::DeadlineExceededError(
        absl::StrCat("Pull for step ", step, " of table '", table_->spec().name,
                     "' (staleness ", staleness_, ") waited ",
                     absl::FormatDuration(timeout_),
                     " for every worker to finish step ", must_be_done, "; ",
                     WorkersPast(must_be_done), " of ", num_workers_, " have"));
  }
  return absl::OkStatus();
}

bool StepSynchronizer::Pullable(uint64_t step) {
  MutexLock lock(&mu_);
  if (mode_ == Mode::kSync) return !started_ || next_step_ >= step;
  return step <= staleness_ ||
         WorkersPast(step - staleness_ - 1) >= num_workers_;
}

absl::Status StepSynchronizer::Push(uint64_t client_id, uint64_t step,
                                    uint32_t parts_in_step,
                                    absl::Span<const uint64_t> keys,
                                    absl::Span<const float> grads) {
  if (mode_ == Mode::kSsp) {
    if (!keys.empty()) {
      const absl::Status status = table_->Push(keys, grads, {step});
      if (!status.ok()) return status;
    }
    {
      MutexLock lock(&mu_);
      auto& parts = ssp_parts_[client_id];
      if (CountPart(parts[step], parts_in_step)) {
        parts.erase(step);
        uint64_t& through = ssp_completed_through_[client_id];
        through = std::max(through, step + 1);
      }
    }
    progressed_.SignalAll();
    return absl::OkStatus();
  }

  MutexLock lock(&mu_);
  if (!started_) {
    started_ = true;
    next_step_ = step;
  }
  if (step < next_step_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "push for step ", step, " of table '", table_->spec().name,
        "' arrived after that step was applied (the table is at step ",
        next_step_,
        step == 0 ? "): the servers hold the tables of an earlier job; to "
                    "start a new job restart the servers (or give each job "
                    "its own tables), to continue that job pass --restore "
                    "with its checkpoint"
                  : ")"));
  }
  // Refuse NaN/Inf before buffering, so that a bad part cannot poison the
  // step's sum (the table would refuse the whole sum later).
  for (float g : grads) {
    if (!std::isfinite(g)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Push of table '", table_->spec().name, "' for step ", step,
          ": a gradient is ", g, "; the whole push is refused"));
    }
  }
  PendingStep& pending = pending_[step];
  if (pending.keys.empty()) {
    // Sized once for the step (every worker's part about this size), not
    // grown key by key.
    const size_t expected = keys.size() * static_cast<size_t>(num_workers_);
    pending.slot_of_key.reserve(expected);
    pending.keys.reserve(expected);
    pending.sums.reserve(expected * dim_);
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, inserted] =
        pending.slot_of_key.try_emplace(keys[i], pending.keys.size());
    if (inserted) {
      pending.keys.push_back(keys[i]);
      pending.sums.insert(pending.sums.end(), grads.begin() + i * dim_,
                          grads.begin() + (i + 1) * dim_);
    } else {
      float* sum = pending.sums.data() + static_cast<size_t>(it->second) * dim_;
      for (int32_t d = 0; d < dim_; ++d) sum[d] += grads[i * dim_ + d];
    }
  }
  if (CountPart(pending.workers[client_id], parts_in_step))
    ++pending.completed_workers;
  return ApplyCompletedSteps();
}

absl::Status StepSynchronizer::ApplyCompletedSteps() {
  bool applied = false;
  absl::Status status;
  while (true) {
    auto it = pending_.find(next_step_);
    if (it == pending_.end() || it->second.completed_workers < num_workers_)
      break;
    status.Update(ApplyStep(next_step_, it->second));
    applied_keys_.push_back(
        std::make_shared<const StepKeys>(std::move(it->second.slot_of_key)));
    if (applied_keys_.size() > kRememberedSteps) applied_keys_.pop_front();
    pending_.erase(it);
    ++next_step_;
    applied = true;
  }
  if (applied) progressed_.SignalAll();
  return status;
}

absl::Status StepSynchronizer::ApplyStep(uint64_t step,
                                         const PendingStep& pending) {
  const size_t keys = pending.keys.size();
  const int parts = static_cast<int>(std::min<size_t>(
      apply_threads_, std::max<size_t>(1, keys / kKeysPerApplyThread)));
  if (parts == 1) return table_->Push(pending.keys, pending.sums, {step});
  // One piece's refusal must not leave the others applied: every part's
  // gradients were finite, but their sum may not be.
  for (const float sum : pending.sums) {
    if (!std::isfinite(sum)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SYNC step ", step, " of table '", table_->spec().name,
                       "': the workers' gradients of a key sum to ", sum,
                       "; the step is refused"));
    }
  }
  std::vector<absl::Status> statuses(parts);
  ForEachPart(parts, [&](int p) {
    const size_t begin = keys * p / parts;
    const size_t end = keys * (p + 1) / parts;
    statuses[p] = table_->Push(
        absl::MakeConstSpan(pending.keys).subspan(begin, end - begin),
        absl::MakeConstSpan(pending.sums)
            .subspan(begin * dim_, (end - begin) * dim_),
        {step});
  });
  absl::Status status;
  for (const absl::Status& s : statuses) status.Update(s);
  return status;
}

uint64_t StepSynchronizer::AppliedThrough() {
  MutexLock lock(&mu_);
  return next_step_;
}

bool StepSynchronizer::ChangedKeys(
    uint64_t from, uint64_t to,
    std::vector<std::shared_ptr<const StepKeys>>* sets) {
  MutexLock lock(&mu_);
  sets->clear();
  if (to > next_step_ || from + applied_keys_.size() < next_step_) {
    return false;
  }
  const uint64_t first = next_step_ - applied_keys_.size();
  for (uint64_t step = from; step < to; ++step) {
    sets->push_back(applied_keys_[step - first]);
  }
  return true;
}

proto::SynchronizerState StepSynchronizer::ExportState() {
  MutexLock lock(&mu_);
  proto::SynchronizerState state;
  state.set_started(started_);
  state.set_next_step(next_step_);
  for (const auto& [step, pending] : pending_) {
    proto::SynchronizerState::Pending* out = state.add_pending();
    out->set_step(step);
    out->mutable_keys()->Add(pending.keys.begin(), pending.keys.end());
    out->mutable_sums()->Add(pending.sums.begin(), pending.sums.end());
    for (const auto& [client, progress] : pending.workers) {
      proto::SynchronizerState::Worker* worker = out->add_workers();
      worker->set_client_id(client);
      worker->set_parts_received(progress.parts_received);
      worker->set_parts_expected(progress.parts_expected);
    }
    out->set_completed_workers(pending.completed_workers);
  }
  for (const auto& [client, steps] : ssp_parts_) {
    for (const auto& [step, progress] : steps) {
      proto::SynchronizerState::Worker* worker = state.add_ssp_parts();
      worker->set_client_id(client);
      worker->set_step(step);
      worker->set_parts_received(progress.parts_received);
      worker->set_parts_expected(progress.parts_expected);
    }
  }
  for (const auto& [client, through] : ssp_completed_through_) {
    proto::SynchronizerState::Completed* done = state.add_ssp_completed();
    done->set_client_id(client);
    done->set_through(through);
  }
  return state;
}

absl::Status StepSynchronizer::ImportState(
    const proto::SynchronizerState& state) {
  std::map<uint64_t, PendingStep> pending;
  for (const proto::SynchronizerState::Pending& in : state.pending()) {
    if (in.step() < state.next_step() ||
        static_cast<size_t>(in.sums_size()) !=
            static_cast<size_t>(in.keys_size()) * dim_ ||
        in.completed_workers() < 0 || in.completed_workers() > num_workers_) {
      return absl::InvalidArgumentError(
          absl::StrCat("synchronizer state of table '", table_->spec().name,
                       "': step ", in.step(), " does not fit (", in.keys_size(),
                       " keys, ", in.sums_size(), " sums, dim ", dim_, ")"));
    }
    PendingStep& out = pending[in.step()];
    out.keys.assign(in.keys().begin(), in.keys().end());
    out.sums.assign(in.sums().begin(), in.sums().end());
    for (size_t i = 0; i < out.keys.size(); ++i) {
      if (!out.slot_of_key.try_emplace(out.keys[i], i).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("synchronizer state of table '", table_->spec().name,
                         "': a key repeats in step ", in.step()));
      }
    }
    for (const proto::SynchronizerState::Worker& w : in.workers()) {
      out.workers[w.client_id()] = {w.parts_received(), w.parts_expected()};
    }
    out.completed_workers = in.completed_workers();
  }
  MutexLock lock(&mu_);
  started_ = state.started();
  next_step_ = state.next_step();
  applied_keys_.clear();  // the table's rows came from elsewhere
  pending_ = std::move(pending);
  ssp_parts_.clear();
  for (const proto::SynchronizerState::Worker& w : state.ssp_parts()) {
    ssp_parts_[w.client_id()][w.step()] = {w.parts_received(),
                                           w.parts_expected()};
  }
  ssp_completed_through_.clear();
  for (const proto::SynchronizerState::Completed& c : state.ssp_completed()) {
    ssp_completed_through_[c.client_id()] = c.through();
  }
  progressed_.SignalAll();
  return absl::OkStatus();
}

}  // namespace embedps::server
