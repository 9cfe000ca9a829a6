// The tokenizer of make-model's Whisper checkpoints: the synthetic byte-level BPE (GPT-2's first
// 4096 merges, ids 0..4351), unreachable filler tokens up to id 50256 so that every special token
// sits at openai/whisper-tiny's id, then Whisper's special tokens: <|endoftext|> 50257,
// <|startoftranscript|> 50258, 99 language tokens 50259..50357, <|translate|> 50358,
// <|transcribe|> 50359, <|startoflm|> 50360, <|startofprev|> 50361, <|nocaptions|> 50362,
// <|notimestamps|> 50363, and the timestamps <|0.00|> .. <|30.00|> 50364..51864.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::makemodel {

inline constexpr int32_t kWhisperEndOfText = 50257;
inline constexpr int32_t kWhisperStartOfTranscript = 50258;
inline constexpr int32_t kWhisperFirstLanguage = 50259;
inline constexpr int32_t kWhisperTranslate = 50358;
inline constexpr int32_t kWhisperTranscribe = 50359;
inline constexpr int32_t kWhisperStartOfLm = 50360;
inline constexpr int32_t kWhisperStartOfPrev = 50361;
inline constexpr int32_t kWhisperNoCaptions = 50362;
inline constexpr int32_t kWhisperNoTimestamps = 50363;
inline constexpr int32_t kWhisperFirstTimestamp = 50364;
inline constexpr int32_t kWhisperTimestamps = 1501;  // 0.00 .. 30.00 s in 0.02 s steps
inline constexpr int32_t kWhisperVocabSize = kWhisperFirstTimestamp + kWhisperTimestamps;

// Whisper's 99 language codes in token order ("en" is 50259, "su" 50357).
const std::vector<std::string_view>& whisper_language_codes();

// openai/whisper-tiny's non-speech suppress_tokens (generation_config.json), in order.
const std::vector<int32_t>& whisper_suppress_tokens();

// Every token from id 50257 on, in id order.
std::vector<std::string> whisper_special_tokens();

// File contents (pretty-printed JSON, UTF-8).
std::string whisper_tokenizer_json_text();
std::string whisper_tokenizer_config_json_text();

}  // namespace kvserve::makemodel
