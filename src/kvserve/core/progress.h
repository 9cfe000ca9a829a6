// A tqdm-style progress bar on stderr for long startup steps (loading weights), as SGLang shows
// "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:03<00:00, ...]".
// On a terminal it redraws one line in place; otherwise (logs, pipes) it prints only the final
// line.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kvserve {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, std::string unit);
  ~ProgressBar();  // finishes the line if update() never reached total

  // Sets the number of finished units (monotonic); redraws at most every 100 ms on a terminal.
  void update(int64_t done);

  // The line as drawn for `done` units after `elapsed_s` seconds (exposed for tests).
  std::string render(int64_t done, double elapsed_s) const;

 private:
  void draw(bool final_line);

  std::string label_;
  int64_t total_;
  std::string unit_;
  int64_t done_ = 0;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace kvserve
