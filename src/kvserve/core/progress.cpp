#include "kvserve/core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace kvserve {
namespace {

std::string clock_str(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{:02}:{:02}", s / 60, s % 60);
}

}  // namespace

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      unit_(std::move(unit)),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  if (!finished_ && done_ > 0) draw(true);
}

void ProgressBar::update(int64_t done) {
  done_ = std::clamp<int64_t>(done, done_, total_);
  if (finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done_ == total_) {
    draw(true);
  } else if (tty_ && now - last_draw_ >= std::chrono::milliseconds(100)) {
    last_draw_ = now;
    draw(false);
  }
}

std::string ProgressBar::render(int64_t done, double elapsed_s) const {
  constexpr int kWidth = 30;
  const double frac = static_cast<double>(done) / static_cast<double>(total_);
  const int filled = static_cast<int>(frac * kWidth);
  const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
  const double left = rate > 0 ? static_cast<double>(total_ - done) / rate : 0.0;
  return fmt::format("{}: {:3}% |{}{}| {}/{} {} [{}<{}, {:.2f} {}/s]", label_,
                     static_cast<int>(frac * 100), std::string(filled, '#'),
                     std::string(kWidth - filled, ' '), done, total_, unit_, clock_str(elapsed_s),
                     clock_str(left), rate, unit_);
}

void ProgressBar::draw(bool final_line) {
  if (final_line && finished_) return;
  if (!final_line && !tty_) return;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string line = render(done_, elapsed);
  std::fprintf(stderr, tty_ ? "\r%s%s" : "%s%s", line.c_str(), final_line ? "\n" : "");
  std::fflush(stderr);
  if (final_line) finished_ = true;
}

}  // namespace kvserve
