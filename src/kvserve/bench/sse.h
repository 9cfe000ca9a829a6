// Server-sent events, as the streaming /generate and /v1/completions responses send them.
//
// Bytes arrive in arbitrary pieces; feed() buffers a partial line until its end arrives. Lines
// end with LF, CRLF or CR. An event is dispatched at a blank line: its `data:` lines joined with
// "\n" (one optional space after the colon is dropped). Comments (":...") and other fields
// (event, id, retry) are ignored, as is a line that is not a field at all. A final event that the
// stream ends without a blank line after is dispatched by finish(). `data: [DONE]` is an
// ordinary event here; the stream readers treat it as the end.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvserve::bench {

class SseParser {
 public:
  // The data of every event completed by these bytes, in order.
  std::vector<std::string> feed(std::string_view bytes);
  // At the end of the stream: the pending event, if its data lines were not yet dispatched.
  std::vector<std::string> finish();

  // Lines seen that were neither blank, comments nor known fields (a sign of a non-SSE body).
  int64_t ignored_lines() const { return ignored_lines_; }

 private:
  void line(std::string_view text, std::vector<std::string>& events);

  std::string partial_;    // bytes of a line whose end has not arrived
  bool after_cr_ = false;  // the last byte fed was CR: a following LF belongs to it
  std::string data_;       // data lines of the current event
  bool has_data_ = false;
  int64_t ignored_lines_ = 0;
};

}  // namespace kvserve::bench
