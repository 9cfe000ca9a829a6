#include "kvserve/bench/sse.h"

namespace kvserve::bench {

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  std::vector<std::string> events;
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\n' && c != '\r') {
      after_cr_ = false;
      continue;
    }
    if (c == '\n' && after_cr_ && i == start) {
      // The LF of a CRLF whose CR ended the previous line.
      after_cr_ = false;
      start = i + 1;
      continue;
    }
    partial_.append(bytes.substr(start, i - start));
    line(partial_, events);
    partial_.clear();
    after_cr_ = c == '\r';
    start = i + 1;
  }
  partial_.append(bytes.substr(start));
  return events;
}

std::vector<std::string> SseParser::finish() {
  std::vector<std::string> events;
  if (!partial_.empty()) {
    line(partial_, events);
    partial_.clear();
  }
  if (has_data_) line("", events);
  after_cr_ = false;
  return events;
}

void SseParser::line(std::string_view text, std::vector<std::string>& events) {
  if (text.empty()) {
    if (has_data_) events.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (text.front() == ':') return;  // a comment (keep-alive)
  const size_t colon = text.find(':');
  const std::string_view field = text.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = text.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_ += '\n';
    data_.append(value);
    has_data_ = true;
  } else if (field != "event" && field != "id" && field != "retry") {
    ++ignored_lines_;
  }
}

}  // namespace kvserve::bench
