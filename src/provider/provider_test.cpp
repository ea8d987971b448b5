// Unit tests of the provider wire layer: the SSE decoder, the OpenAI and Anthropic stream parsers
// (fed recorded-style bodies written from the documented formats, split at every byte), the
// request builders and the schema transforms.
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "provider/anthropic.hpp"
#include "provider/openai.hpp"
#include "provider/provider.hpp"
#include "provider/schema_transform.hpp"
#include "provider/sse_decoder.hpp"

namespace sb::provider {
// Readable failure messages: one line per event instead of the variant's bytes.
inline void PrintTo(const StreamEvent& event, std::ostream* os) {
  *os << describe(event);
}
}  // namespace sb::provider

namespace sb::sse {
inline void PrintTo(const SseEvent& e, std::ostream* os) {
  *os << "{type=" << e.type << " data=" << json::serialize(json::string_view(e.data))
      << " id=" << e.id << " retry=" << (e.retry ? std::to_string(*e.retry) : "-") << "}";
}
}  // namespace sb::sse

namespace sb::provider {
namespace {

using sse::SseDecoder;
using sse::SseEvent;
using Events = std::vector<StreamEvent>;

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

json::object parse_object(std::string_view text) {
  auto r = parse_json(text);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  if (!r || !r->is_object()) return {};
  return r->get_object();
}

std::string dump(const Events& events) {
  std::string out;
  for (const auto& e : events)
    out += "  " + describe(e) + "\n";
  return out;
}

bool is_terminal(const StreamEvent& e) {
  return std::holds_alternative<StepFinish>(e) || std::holds_alternative<StreamError>(e);
}

// ---- Feeding helpers -------------------------------------------------------------------------

std::vector<SseEvent> sse_split(std::string_view body, std::initializer_list<std::size_t> cuts) {
  SseDecoder decoder;
  std::vector<SseEvent> out;
  std::size_t from = 0;
  for (std::size_t cut : cuts) {
    EXPECT_TRUE(decoder.feed(body.substr(from, cut - from), out).has_value());
    from = cut;
  }
  EXPECT_TRUE(decoder.feed(body.substr(from), out).has_value());
  return out;
}

std::vector<SseEvent> sse_whole(std::string_view body) {
  return sse_split(body, {});
}

std::vector<SseEvent> sse_bytewise(std::string_view body) {
  SseDecoder decoder;
  std::vector<SseEvent> out;
  for (char c : body)
    EXPECT_TRUE(decoder.feed(std::string_view(&c, 1), out).has_value());
  return out;
}

// The same events whether the body comes whole, in two parts split at any byte, or byte by byte.
::testing::AssertionResult SseSplitInvariant(std::string_view body) {
  const auto whole = sse_whole(body);
  for (std::size_t at = 0; at <= body.size(); ++at) {
    if (sse_split(body, {at}) != whole)
      return ::testing::AssertionFailure() << "split at byte " << at << " gives other events";
  }
  if (sse_bytewise(body) != whole)
    return ::testing::AssertionFailure() << "byte-by-byte feeding gives other events";
  return ::testing::AssertionSuccess();
}

template <class Parser>
Events parse_parts(std::initializer_list<std::string_view> parts, bool finish = true) {
  Parser parser;
  Events out;
  for (auto part : parts)
    parser.feed(part, out);
  if (finish) parser.finish(out);
  return out;
}

template <class Parser>
Events parse_whole(std::string_view body) {
  return parse_parts<Parser>({body});
}

template <class Parser>
Events parse_bytewise(std::string_view body) {
  Parser parser;
  Events out;
  for (char c : body)
    parser.feed(std::string_view(&c, 1), out);
  parser.finish(out);
  return out;
}

template <class Parser>
::testing::AssertionResult ParserSplitInvariant(std::string_view body) {
  const Events whole = parse_whole<Parser>(body);
  for (std::size_t at = 0; at <= body.size(); ++at) {
    Events split = parse_parts<Parser>({body.substr(0, at), body.substr(at)});
    if (split != whole)
      return ::testing::AssertionFailure() << "split at byte " << at << " gives\n"
                                           << dump(split) << "instead of\n"
                                           << dump(whole);
  }
  Events bytewise = parse_bytewise<Parser>(body);
  if (bytewise != whole)
    return ::testing::AssertionFailure() << "byte-by-byte feeding gives\n"
                                         << dump(bytewise) << "instead of\n"
                                         << dump(whole);
  return ::testing::AssertionSuccess();
}

// Whatever prefix of a body arrives before the connection drops, the parser ends with exactly
// one terminal event, as its last event.
template <class Parser>
::testing::AssertionResult EveryPrefixEndsWithOneTerminal(std::string_view body) {
  for (std::size_t len = 0; len <= body.size(); ++len) {
    Events events = parse_whole<Parser>(body.substr(0, len));
    std::size_t terminals = 0;
    for (const auto& e : events)
      terminals += is_terminal(e) ? 1 : 0;
    if (terminals != 1 || events.empty() || !is_terminal(events.back()))
      return ::testing::AssertionFailure()
             << "prefix of " << len << " bytes gives " << terminals << " terminal events:\n"
             << dump(events);
  }
  return ::testing::AssertionSuccess();
}

// A body of "data: X" events, as OpenAI-compatible servers send them.
std::string data_events(std::initializer_list<std::string_view> payloads) {
  std::string body;
  for (auto p : payloads) {
    body += "data: ";
    body += p;
    body += "\n\n";
  }
  return body;
}

ToolCall tool_call(std::string id, std::string name, std::string_view input_json, std::string raw) {
  ToolCall call;
  call.id = std::move(id);
  call.name = std::move(name);
  call.input = parse_json(input_json).value();
  call.raw_input = std::move(raw);
  return call;
}

// =================================================================================================
// SSE decoder
// =================================================================================================

TEST(SseDecoder, DecodesEventsWithTypeIdAndRetry) {
  auto events = sse_whole(
      "event: update\nid: 7\nretry: 1500\ndata: {\"a\":1}\n\n"
      "data: plain\n\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], (SseEvent{"update", "{\"a\":1}", "7", 1500}));
  // The id persists to later events; retry and event type belong to their block only.
  EXPECT_EQ(events[1], (SseEvent{"message", "plain", "7", std::nullopt}));
}

TEST(SseDecoder, AcceptsLfCrLfAndCrLineEndings) {
  const std::vector<SseEvent> expected = {{"message", "one", "", {}}, {"e", "two", "", {}}};
  EXPECT_EQ(sse_whole("data: one\n\nevent: e\ndata: two\n\n"), expected);
  EXPECT_EQ(sse_whole("data: one\r\n\r\nevent: e\r\ndata: two\r\n\r\n"), expected);
  EXPECT_EQ(sse_whole("data: one\r\revent: e\rdata: two\r\r"), expected);
  EXPECT_EQ(sse_whole("data: one\r\n\nevent: e\rdata: two\n\r"), expected);  // mixed
}

TEST(SseDecoder, CrLfSplitBetweenChunksIsOneLineEnding) {
  // If the CR and the LF were two line endings, the LF would end the block early (an empty line)
  // and "data: b" would become a second event.
  std::string body = "data: a\r\ndata: b\r\n\r\n";
  std::vector<SseEvent> expected = {{"message", "a\nb", "", {}}};
  EXPECT_EQ(sse_split(body, {8}), expected);   // "data: a\r" | "\ndata: b..."
  EXPECT_EQ(sse_split(body, {17}), expected);  // "...b\r\n\r" | "\n"
  EXPECT_TRUE(SseSplitInvariant(body));
}

TEST(SseDecoder, JoinsMultiLineDataWithNewlines) {
  auto events = sse_whole("data: first\ndata:second\ndata\ndata:  indented\n\n");
  ASSERT_EQ(events.size(), 1u);
  // A field without a colon has an empty value; only one space after the colon is removed.
  EXPECT_EQ(events[0].data, "first\nsecond\n\n indented");
}

TEST(SseDecoder, IgnoresCommentsAndUnknownFields) {
  auto events = sse_whole(": keep-alive\n\n:\ndata: x\n: inside\nfoo: bar\nDATA: upper\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "x");  // field names are case-sensitive: "DATA" is unknown
}

TEST(SseDecoder, BlockWithoutDataDispatchesNothingButKeepsIdAndRetry) {
  SseDecoder decoder;
  std::vector<SseEvent> out;
  ASSERT_TRUE(decoder.feed("event: lonely\nid: 42\nretry: 3000\n\n\n\ndata: after\n\n", out));
  ASSERT_EQ(out.size(), 1u);
  // The event type of the data-less block does not leak into the next event.
  EXPECT_EQ(out[0], (SseEvent{"message", "after", "42", std::nullopt}));
  EXPECT_EQ(decoder.last_event_id(), "42");
  EXPECT_EQ(decoder.retry(), 3000u);
}

TEST(SseDecoder, EmptyDataLineDispatchesAnEventWithEmptyData) {
  auto events = sse_whole("data:\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "");
}

TEST(SseDecoder, StripsOneLeadingBomOnly) {
  EXPECT_EQ(sse_whole("\xEF\xBB\xBF"
                      "data: x\n\n"),
            (std::vector<SseEvent>{{"message", "x", "", {}}}));
  // A second BOM is part of the first line's field name, which is then unknown.
  EXPECT_TRUE(sse_whole("\xEF\xBB\xBF\xEF\xBB\xBF"
                        "data: x\n\n")
                  .empty());
  // A BOM later in the stream is ordinary data.
  auto later = sse_whole(
      "data: a\n\ndata: \xEF\xBB\xBF"
      "b\n\n");
  ASSERT_EQ(later.size(), 2u);
  EXPECT_EQ(later[1].data,
            "\xEF\xBB\xBF"
            "b");
  // Bytes that start like a BOM but are not one are kept.
  auto not_bom = sse_whole(
      "\xEF\xBB"
      "data: x\n\n");
  EXPECT_TRUE(not_bom.empty());  // "\xEF\xBBdata" is an unknown field
  EXPECT_TRUE(
      SseSplitInvariant("\xEF\xBB\xBF"
                        "data: x\r\n\r\n"));
}

TEST(SseDecoder, IdWithNulIsIgnoredAndEmptyIdResets) {
  using namespace std::string_literals;  // the body holds a NUL
  auto events = sse_whole("id: 1\ndata: a\n\nid: 2\0x\ndata: b\n\nid\ndata: c\n\n"s);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].id, "1");
  EXPECT_EQ(events[1].id, "1");  // "2\0x" was ignored
  EXPECT_EQ(events[2].id, "");   // an empty id resets it
}

TEST(SseDecoder, RetryMustBeDigits) {
  SseDecoder decoder;
  std::vector<SseEvent> out;
  ASSERT_TRUE(decoder.feed("retry: 10s\ndata: a\n\nretry: -5\ndata: b\n\n", out));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_FALSE(out[0].retry);
  EXPECT_FALSE(out[1].retry);
  EXPECT_FALSE(decoder.retry());
  ASSERT_TRUE(decoder.feed("retry: 99999999999999999999999\ndata: c\n\n", out));
  EXPECT_EQ(out.back().retry, std::numeric_limits<std::uint64_t>::max());  // saturates
}

TEST(SseDecoder, IncompleteEventIsHeldUntilItsBlankLine) {
  SseDecoder decoder;
  std::vector<SseEvent> out;
  ASSERT_TRUE(decoder.feed("data: part", out));
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(decoder.feed("ial\n", out));
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(decoder.feed("\n", out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, "partial");
}

TEST(SseDecoder, FinishDispatchesCompleteLinesButDropsACutLine) {
  SseDecoder decoder;
  std::vector<SseEvent> out;
  ASSERT_TRUE(decoder.feed("data: [DONE]\n", out));
  decoder.finish(out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, "[DONE]");

  SseDecoder cut;
  std::vector<SseEvent> none;
  ASSERT_TRUE(cut.feed("data: {\"a\":", none));
  cut.finish(none);
  EXPECT_TRUE(none.empty());
}

TEST(SseDecoder, EventLargerThanTheLimitFailsAndStaysFailed) {
  SseDecoder decoder(SseDecoder::Options{.max_event_bytes = 16});
  std::vector<SseEvent> out;
  ASSERT_TRUE(decoder.feed("data: 0123456789\n\n", out));  // 10 bytes of data: fine
  auto r = decoder.feed("data: 0123456789\ndata: 0123456789\n\n", out);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::TooLarge);
  EXPECT_FALSE(decoder.feed("data: x\n\n", out));
  EXPECT_EQ(out.size(), 1u);
  // A line that never ends is caught too, without waiting for its end.
  SseDecoder endless(SseDecoder::Options{.max_event_bytes = 16});
  EXPECT_TRUE(endless.feed("data: 0123456", out));
  EXPECT_FALSE(endless.feed("789abcdefgh", out));
}

TEST(SseDecoder, ErrorFieldIsIgnoredUnlessAsked) {
  std::string body = "data: a\nerror: {\"code\":500}\ndata: b\n\n";
  EXPECT_EQ(sse_whole(body), (std::vector<SseEvent>{{"message", "a\nb", "", {}}}));
  SseDecoder decoder(SseDecoder::Options{.error_field_as_event = true});
  std::vector<SseEvent> out;
  ASSERT_TRUE(decoder.feed(body, out));
  EXPECT_EQ(out, (std::vector<SseEvent>{{"error", "{\"code\":500}", "", {}},
                                        {"message", "a\nb", "", {}}}));
}

TEST(SseDecoder, EverySplitGivesTheSameEvents) {
  std::string body =
      "\xEF\xBB\xBF: comment\r\n"
      "event: content_block_delta\r\nid: 5\r\ndata: {\"text\":\"h\xC3\xA9llo\"}\r\n\r\n"
      "data: line one\rdata: line two\r\r"
      "retry: 250\ndata\n\n"
      "data: last\n\n";
  EXPECT_TRUE(SseSplitInvariant(body));
  auto events = sse_whole(body);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0], (SseEvent{"content_block_delta", "{\"text\":\"h\xC3\xA9llo\"}", "5", {}}));
  EXPECT_EQ(events[1].data, "line one\nline two");
  EXPECT_EQ(events[2], (SseEvent{"message", "", "5", 250}));
  EXPECT_EQ(events[3].data, "last");
}

// =================================================================================================
// OpenAI-compatible stream
// =================================================================================================

// A chat.completion.chunk: the fields every chunk repeats, then `fields` (choices, usage).
std::string chunk(std::string_view fields) {
  return R"({"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1718000000,)"
         R"("model":"gpt-4o-mini","system_fingerprint":"fp_1",)" +
         std::string(fields) + "}";
}

const std::string kOpenAITextStream = data_events({
    chunk(
        R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null)"),
    chunk(
        R"("choices":[{"index":0,"delta":{"reasoning_content":"The user greets me."},"logprobs":null,"finish_reason":null}],"usage":null)"),
    chunk(
        R"("choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null)"),
    chunk(
        R"("choices":[{"index":0,"delta":{"content":", w\u00f6rld \u2713 \"quoted\"\n"},"logprobs":null,"finish_reason":null}],"usage":null)"),
    chunk(
        R"("choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null)"),
    chunk(
        R"("choices":[],"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150,"prompt_tokens_details":{"cached_tokens":100,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":12,"audio_tokens":0}})"),
    "[DONE]",
});

TEST(OpenAIStream, TextReasoningUsageAndDone) {
  Events events = parse_whole<OpenAIStreamParser>(kOpenAITextStream);
  Events expected = {
      ReasoningDelta{"The user greets me."},
      TextDelta{"Hello"},
      TextDelta{", w\xC3\xB6rld \xE2\x9C\x93 \"quoted\"\n"},
      StepFinish{FinishReason::Stop,
                 Usage{.input = 20, .output = 18, .reasoning = 12, .cache_read = 100}, "stop"},
  };
  EXPECT_EQ(events, expected) << dump(events);
}

TEST(OpenAIStream, TextStreamIsTheSameAtEverySplit) {
  EXPECT_TRUE(ParserSplitInvariant<OpenAIStreamParser>(kOpenAITextStream));
}

// Three parallel calls: ids and names in each index's first delta, arguments spread over many
// deltas, index 1's arguments interleaved after index 2 started, index 2 without arguments.
const std::string kOpenAIToolStream = data_events({
    chunk(
        R"("choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_A1","type":"function","function":{"name":"read","arguments":""}}]},"finish_reason":null}])"),
    chunk(
        R"("choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]},"finish_reason":null}])"),
    chunk(
        R"("choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\": \"src/a.txt\"}"}}]},"finish_reason":null}])"),
    chunk(
        R"("choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_B2","type":"function","function":{"name":"bash","arguments":""}}]},"finish_reason":null}])"),
    chunk(
        R"("choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"command\":"}}]},"finish_reason":null}])"),
    chunk(
        R"("choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"call_C3","type":"function","function":{"name":"todoread","arguments":""}}]},"finish_reason":null}])"),
    chunk(
        R"("choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":" \"ls -la\"}"}}]},"finish_reason":null}])"),
    chunk(R"("choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}])"),
    chunk(
        R"("choices":[],"usage":{"prompt_tokens":812,"completion_tokens":64,"total_tokens":876})"),
    "[DONE]",
});

TEST(OpenAIStream, ParallelToolCallsSplitOverChunks) {
  Events events = parse_whole<OpenAIStreamParser>(kOpenAIToolStream);
  Events expected = {
      ToolInputStart{0, "call_A1", "read"},
      ToolInputDelta{"call_A1", "{\"pa"},
      ToolInputDelta{"call_A1", "th\": \"src/a.txt\"}"},
      ToolInputStart{1, "call_B2", "bash"},
      ToolInputDelta{"call_B2", "{\"command\":"},
      ToolInputStart{2, "call_C3", "todoread"},
      ToolInputDelta{"call_B2", " \"ls -la\"}"},
      tool_call("call_A1", "read", R"({"path":"src/a.txt"})", R"({"path": "src/a.txt"})"),
      tool_call("call_B2", "bash", R"({"command":"ls -la"})", R"({"command": "ls -la"})"),
      tool_call("call_C3", "todoread", "{}", ""),
      StepFinish{FinishReason::ToolCalls, Usage{.input = 812, .output = 64}, "tool_calls"},
  };
  EXPECT_EQ(events, expected) << dump(events);
  EXPECT_TRUE(ParserSplitInvariant<OpenAIStreamParser>(kOpenAIToolStream));
}

TEST(OpenAIStream, StreamCutMidToolCallIsAnError) {
  // The body stops after the second argument delta of call_A1: no finish_reason, no [DONE].
  std::string_view body = kOpenAIToolStream;
  std::size_t cut = body.find("th\\\": ");
  ASSERT_NE(cut, std::string_view::npos);
  cut = body.rfind("data: ", cut);
  Events events = parse_whole<OpenAIStreamParser>(body.substr(0, cut));
  Events expected = {
      ToolInputStart{0, "call_A1", "read"},
      ToolInputDelta{"call_A1", "{\"pa"},
      StreamError{std::string(kStreamEndedEarly), true},
  };
  EXPECT_EQ(events, expected) << dump(events);
}

TEST(OpenAIStream, EveryTruncationEndsWithExactlyOneTerminalEvent) {
  EXPECT_TRUE(EveryPrefixEndsWithOneTerminal<OpenAIStreamParser>(kOpenAIToolStream));
  EXPECT_TRUE(EveryPrefixEndsWithOneTerminal<OpenAIStreamParser>(kOpenAITextStream));
}

TEST(OpenAIStream, EmptyBodyIsAnError) {
  Events events = parse_whole<OpenAIStreamParser>("");
  EXPECT_EQ(events, (Events{StreamError{std::string(kStreamEndedEarly), true}}));
}

TEST(OpenAIStream, FinishReasonMapping) {
  struct Case {
    const char* wire;
    FinishReason expected;
  };
  for (auto [wire, expected] :
       {Case{"stop", FinishReason::Stop}, Case{"tool_calls", FinishReason::ToolCalls},
        Case{"function_call", FinishReason::ToolCalls}, Case{"length", FinishReason::Length},
        Case{"content_filter", FinishReason::ContentFilter},
        Case{"something_new", FinishReason::Other}}) {
    std::string body = data_events(
        {std::string(R"({"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":")") + wire +
             R"("}]})",
         "[DONE]"});
    Events events = parse_whole<OpenAIStreamParser>(body);
    ASSERT_EQ(events.size(), 2u) << wire << "\n" << dump(events);
    EXPECT_EQ(events[1], (StreamEvent{StepFinish{expected, {}, wire}})) << wire;
  }
}

TEST(OpenAIStream, StopWithToolCallsIsReportedAsToolCalls) {
  // Older Ollama and some vLLM templates say "stop" after calling tools.
  Events events = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"list","arguments":"{}"}}]},"finish_reason":null}]})",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})",
      "[DONE]",
  }));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), (StreamEvent{StepFinish{FinishReason::ToolCalls, {}, "stop"}}));
}

TEST(OpenAIStream, UsageWithoutDetailsAndDeepSeekCacheFields) {
  Events plain = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"}]})",
      R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}})",
      "[DONE]",
  }));
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(
      plain[1],
      (StreamEvent{StepFinish{FinishReason::Length, Usage{.input = 10, .output = 5}, "length"}}));

  Events deepseek = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}],"usage":{"prompt_tokens":64,"completion_tokens":9,"total_tokens":73,"prompt_cache_hit_tokens":60,"prompt_cache_miss_tokens":4}})",
      "[DONE]",
  }));
  ASSERT_EQ(deepseek.size(), 2u);
  EXPECT_EQ(std::get<StepFinish>(deepseek[1]).usage,
            (Usage{.input = 4, .output = 9, .cache_read = 60}));
}

TEST(OpenAIStream, FinishReasonWithoutDoneStillFinishes) {
  // The connection closed cleanly after the last chunk; nothing the step needs is missing.
  Events events = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]})",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})",
  }));
  EXPECT_EQ(events, (Events{TextDelta{"ok"}, StepFinish{FinishReason::Stop, {}, "stop"}}));
}

TEST(OpenAIStream, DoneWithoutFinishReasonInfersTheReason) {
  Events text = parse_whole<OpenAIStreamParser>(
      data_events({R"({"choices":[{"index":0,"delta":{"content":"ok"}}]})", "[DONE]"}));
  EXPECT_EQ(text, (Events{TextDelta{"ok"}, StepFinish{FinishReason::Stop, {}, ""}}));
  Events calls = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"list","arguments":"{}"}}]}}]})",
      "[DONE]",
  }));
  ASSERT_EQ(calls.size(), 4u) << dump(calls);
  EXPECT_EQ(calls[2], (StreamEvent{tool_call("c1", "list", "{}", "{}")}));
  EXPECT_EQ(calls[3], (StreamEvent{StepFinish{FinishReason::ToolCalls, {}, ""}}));
}

TEST(OpenAIStream, MalformedJsonIsAnErrorNotACrash) {
  OpenAIStreamParser parser;
  Events events;
  parser.feed(data_events({
                  R"({"choices":[{"index":0,"delta":{"content":"fine"}}]})",
                  R"({"choices":[{"index":0,"delta":{"content":"cut)",
                  R"({"choices":[{"index":0,"delta":{"content":"never seen"}}]})",
              }),
              events);
  EXPECT_TRUE(parser.done());
  parser.feed(data_events({"[DONE]"}), events);
  parser.finish(events);
  ASSERT_EQ(events.size(), 2u) << dump(events);
  EXPECT_EQ(events[0], (StreamEvent{TextDelta{"fine"}}));
  const auto* error = std::get_if<StreamError>(&events[1]);
  ASSERT_NE(error, nullptr);
  EXPECT_FALSE(error->retryable);
  EXPECT_TRUE(Contains(error->message, "malformed chunk"));

  Events scalar = parse_whole<OpenAIStreamParser>(data_events({"42"}));
  ASSERT_EQ(scalar.size(), 1u);
  EXPECT_TRUE(Contains(std::get<StreamError>(scalar[0]).message, "expected an object, got number"));
}

TEST(OpenAIStream, ErrorObjectInTheStream) {
  Events server = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[{"index":0,"delta":{"content":"par"}}]})",
      R"({"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}})",
  }));
  EXPECT_EQ(server, (Events{TextDelta{"par"},
                            StreamError{"server_error: The server had an error while processing "
                                        "your request.",
                                        true}}));

  Events invalid = parse_whole<OpenAIStreamParser>(data_events({
      R"({"error":{"message":"Invalid schema for function 'x'","type":"invalid_request_error","param":"tools[0]","code":"invalid_function_parameters"}})",
  }));
  EXPECT_EQ(invalid,
            (Events{StreamError{"invalid_request_error: Invalid schema for function 'x'", false}}));

  // OpenRouter: numeric code, and a finish_reason "error" beside it.
  Events openrouter = parse_whole<OpenAIStreamParser>(data_events({
      R"({"id":"gen-1","object":"chat.completion.chunk","error":{"code":429,"message":"Rate limit exceeded"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]})",
  }));
  EXPECT_EQ(openrouter, (Events{StreamError{"429: Rate limit exceeded", true}}));

  // vLLM: the chunk itself is the error.
  Events vllm = parse_whole<OpenAIStreamParser>(data_events({
      R"({"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400})",
  }));
  EXPECT_EQ(vllm,
            (Events{StreamError{
                "BadRequestError: This model's maximum context length is 4096 tokens.", false}}));
}

TEST(OpenAIStream, ErrorEventsAndLlamaCppErrorLines) {
  // llama.cpp's server: an "error:" line instead of a data line.
  Events llama = parse_whole<OpenAIStreamParser>(
      data_events({R"({"choices":[{"index":0,"delta":{"content":"a"}}]})"}) +
      "error: {\"code\":500,\"message\":\"Context size has been "
      "exceeded.\",\"type\":\"server_error\"}\n\n");
  EXPECT_EQ(llama, (Events{TextDelta{"a"},
                           StreamError{"server_error: Context size has been exceeded.", true}}));

  Events named = parse_whole<OpenAIStreamParser>(
      "event: error\ndata: {\"error\":{\"message\":\"bad "
      "key\",\"type\":\"invalid_request_error\"}}\n\n");
  EXPECT_EQ(named, (Events{StreamError{"invalid_request_error: bad key", false}}));

  Events text = parse_whole<OpenAIStreamParser>("event: error\ndata: upstream went away\n\n");
  EXPECT_EQ(text, (Events{StreamError{"upstream went away", false}}));
}

TEST(OpenAIStream, ReasoningFieldNamesOfDifferentServers) {
  // OpenRouter / Ollama / newer vLLM: "reasoning". A server sending both names sends the same
  // text twice; it must come out once.
  Events events = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[{"index":0,"delta":{"reasoning":"think A"}}]})",
      R"({"choices":[{"index":0,"delta":{"reasoning":"think B","reasoning_content":"think B"}}]})",
      R"({"choices":[{"index":0,"delta":{"content":"answer","reasoning":null}}]})",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})",
      "[DONE]",
  }));
  EXPECT_EQ(events, (Events{ReasoningDelta{"think A"}, ReasoningDelta{"think B"},
                            TextDelta{"answer"}, StepFinish{FinishReason::Stop, {}, "stop"}}));
}

TEST(OpenAIStream, InvalidArgumentsAreCarriedRawWithAFlag) {
  Events events = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"edit","arguments":"{\"path\": \"a\", \"old\": "}}]}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"read","arguments":"[1, 2]"}}]}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"c3","type":"function","function":{"name":"read","arguments":"\"{\\\"path\\\": \\\"b\\\"}\""}}]}}]})",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})",
      "[DONE]",
  }));
  std::vector<ToolCall> calls;
  for (auto& e : events)
    if (auto* c = std::get_if<ToolCall>(&e)) calls.push_back(*c);
  ASSERT_EQ(calls.size(), 3u) << dump(events);

  EXPECT_FALSE(calls[0].input_valid);
  EXPECT_EQ(calls[0].raw_input, R"({"path": "a", "old": )");
  EXPECT_TRUE(Contains(calls[0].input_error, "invalid JSON"));

  EXPECT_FALSE(calls[1].input_valid);
  EXPECT_EQ(calls[1].raw_input, "[1, 2]");
  EXPECT_TRUE(Contains(calls[1].input_error, "must be a JSON object, got array"));

  // Double-encoded object: unwrapped.
  EXPECT_TRUE(calls[2].input_valid) << calls[2].input_error;
  EXPECT_EQ(calls[2].input, parse_json(R"({"path":"b"})").value());
}

TEST(OpenAIStream, ServerQuirksInToolCallDeltas) {
  // (1) Every call as index 0, told apart by the id; (2) a call without an id; (3) the whole
  // call in one delta with the arguments as an object; (4) arguments before the name.
  Events events = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x1","function":{"name":"read","arguments":"{\"path\":\"a\"}"}}]}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x2","function":{"name":"read","arguments":"{\"path\":\"b\"}"}}]}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"name":"glob","arguments":{"pattern":"*.md"}}}]}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"id":"x4","function":{"arguments":"{}"}}]}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"function":{"name":"list"}}]}}]})",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})",
      "[DONE]",
  }));
  std::vector<ToolInputStart> starts;
  std::vector<ToolCall> calls;
  for (auto& e : events) {
    if (auto* s = std::get_if<ToolInputStart>(&e)) starts.push_back(*s);
    if (auto* c = std::get_if<ToolCall>(&e)) calls.push_back(*c);
  }
  ASSERT_EQ(calls.size(), 4u) << dump(events);
  ASSERT_EQ(starts.size(), 4u) << dump(events);
  EXPECT_EQ(calls[0], tool_call("x1", "read", R"({"path":"a"})", R"({"path":"a"})"));
  EXPECT_EQ(calls[1], tool_call("x2", "read", R"({"path":"b"})", R"({"path":"b"})"));
  EXPECT_EQ(calls[2].name, "glob");
  EXPECT_EQ(calls[2].input, parse_json(R"({"pattern":"*.md"})").value());
  EXPECT_EQ(calls[2].id.rfind("call_", 0), 0u) << calls[2].id;  // made up, with the usual prefix
  EXPECT_EQ(calls[2].id, starts[2].id);
  EXPECT_EQ(calls[3], tool_call("x4", "list", "{}", "{}"));
  // The arguments that came before the name were announced right after the start.
  auto start4 =
      std::find(events.begin(), events.end(), StreamEvent{ToolInputStart{3, "x4", "list"}});
  ASSERT_NE(start4, events.end()) << dump(events);
  EXPECT_EQ(*(start4 + 1), (StreamEvent{ToolInputDelta{"x4", "{}"}}));
  for (std::size_t i = 0; i < starts.size(); ++i)
    EXPECT_EQ(starts[i].index, i);
}

TEST(OpenAIStream, MadeUpIdsAreUnique) {
  std::string body = data_events({
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"a","arguments":"{}"}},{"index":1,"function":{"name":"b","arguments":"{}"}}]}}]})",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})",
      "[DONE]",
  });
  std::set<std::string> ids;
  for (int run = 0; run < 2; ++run)
    for (auto& e : parse_whole<OpenAIStreamParser>(body))
      if (auto* c = std::get_if<ToolCall>(&e)) ids.insert(c->id);
  EXPECT_EQ(ids.size(), 4u);
}

TEST(OpenAIStream, KeepAliveCommentsCrLfAndOtherChoicesAreIgnored) {
  std::string body =
      ": OPENROUTER PROCESSING\r\n\r\n"
      "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"other choice\"}},"
      "{\"index\":0,\"delta\":{\"content\":\"mine\"}}]}\r\n\r\n"
      ": OPENROUTER PROCESSING\r\n\r\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\r\n\r\n"
      "data: [DONE]\r\n\r\n";
  EXPECT_EQ(parse_whole<OpenAIStreamParser>(body),
            (Events{TextDelta{"mine"}, StepFinish{FinishReason::Stop, {}, "stop"}}));
  EXPECT_TRUE(ParserSplitInvariant<OpenAIStreamParser>(body));
}

TEST(OpenAIStream, NothingAfterTheTerminalEvent) {
  OpenAIStreamParser parser;
  Events events;
  parser.feed(kOpenAITextStream, events);
  ASSERT_TRUE(parser.done());
  std::size_t count = events.size();
  parser.feed(data_events({R"({"choices":[{"index":0,"delta":{"content":"late"}}]})"}), events);
  parser.finish(events);
  parser.finish(events);
  EXPECT_EQ(events.size(), count);
}

TEST(OpenAIStream, OversizedEventIsAnError) {
  OpenAIStreamParser parser(sse::SseDecoder::Options{.max_event_bytes = 64});
  Events events;
  parser.feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + std::string(100, 'x'),
              events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(Contains(std::get<StreamError>(events[0]).message, "larger than 64 bytes"));
}

// How a chunk's JSON is read must not show: keys in any order (the index of a call after its
// function, finish_reason before delta, the choice's index last, usage before choices).
TEST(OpenAIStream, KeysInAnyOrder) {
  Events events = parse_whole<OpenAIStreamParser>(data_events({
      R"({"usage":{"completion_tokens_details":{"reasoning_tokens":2},"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":3},"prompt_tokens":10},"choices":[{"finish_reason":null,"delta":{"tool_calls":[{"function":{"arguments":"{\"a\":","name":"f"},"type":"function","id":"k1","index":4}]},"index":0}],"object":"chat.completion.chunk"})",
      R"({"choices":[{"finish_reason":"tool_calls","delta":{"tool_calls":[{"function":{"arguments":"1}"},"index":4}]},"index":0}]})",
      "[DONE]",
  }));
  Events expected = {
      ToolInputStart{0, "k1", "f"},
      ToolInputDelta{"k1", "{\"a\":"},
      ToolInputDelta{"k1", "1}"},
      tool_call("k1", "f", R"({"a":1})", R"({"a":1})"),
      StepFinish{FinishReason::ToolCalls,
                 Usage{.input = 7, .output = 3, .reasoning = 2, .cache_read = 3}, "tool_calls"},
  };
  EXPECT_EQ(events, expected) << dump(events);

  // An error after the choices: the chunk is the error, its content is not shown first.
  Events error_last = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[{"index":0,"delta":{"content":"x"}}],"error":{"message":"m","type":"server_error"}})",
  }));
  EXPECT_EQ(error_last, (Events{StreamError{"server_error: m", true}})) << dump(error_last);
  // vLLM's error chunk with its "object" last.
  Events object_last = parse_whole<OpenAIStreamParser>(data_events({
      R"({"message":"busy","code":503,"object":"error"})",
  }));
  EXPECT_EQ(object_last, (Events{StreamError{"503: busy", true}})) << dump(object_last);
}

// Of duplicate keys the last wins, whatever the earlier ones held (as in a json::object).
TEST(OpenAIStream, DuplicateKeysLastWins) {
  Events events = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[{"index":0,"delta":{"content":"NOT 1"}}],"choices":[{"index":0,"delta":{"content":"one"}}]})",
      R"({"choices":[{"index":0,"delta":{"content":"NOT 2","reasoning":"NOT 3"},"delta":{"refusal":"two"}}]})",
      R"({"choices":[{"index":0,"delta":{"content":"NOT 4","content":null}}]})",
      R"({"choices":[{"index":1,"index":0,"delta":{"content":"three"}}]})",
      R"({"choices":[{"index":0,"index":1,"delta":{"content":"NOT 5"}}]})",
      R"({"error":{"message":"NOT 6"},"error":null,"choices":[]})",
      R"({"error":"NOT 8","error":null,"choices":[{"index":0,"delta":{"content":"four"}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"NOT 7"},"function":{"name":"f","arguments":"{\"a\":1}","arguments":{"b":2}}}]}}]})",
      R"({"choices":[],"usage":{"prompt_tokens":5,"prompt_tokens":9,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":3},"prompt_tokens_details":{}}})",
      R"({"choices":[],"usage":{"prompt_tokens":1000},"usage":null})",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop","finish_reason":"tool_calls"}]})",
      "[DONE]",
  }));
  Events expected = {
      TextDelta{"one"},
      TextDelta{"two"},
      TextDelta{"three"},
      TextDelta{"four"},
      ToolInputStart{0, "c1", "f"},
      ToolInputDelta{"c1", R"({"b":2})"},
      tool_call("c1", "f", R"({"b":2})", R"({"b":2})"),
      StepFinish{FinishReason::ToolCalls, Usage{.input = 9, .output = 4}, "tool_calls"},
  };
  EXPECT_EQ(events, expected) << dump(events);
}

// Arguments sent as an object are serialized as the tree writes it: nested values, escapes,
// numbers kept, the last of duplicate keys. Arguments of any other kind are none.
TEST(OpenAIStream, ArgumentsAsAnObjectAreItsText) {
  std::string_view object =
      R"({"pattern":"*.md","opts":{"deep":[1,{"x":null,"y":[true,false]}],"n":1.5,"big":18446744073709551615,"s":"a\"b\\c\u00e9\n"},"pattern":"*.txt"})";
  std::string text = json::serialize(parse_json(object).value());
  Events events = parse_whole<OpenAIStreamParser>(data_events({
      std::string(
          R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"g1","function":{"name":"glob","arguments":)") +
          std::string(object) + "}}]}}]}",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"g2","function":{"name":"list","arguments":[1,2]}}]}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":7}}]}}]})",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})",
      "[DONE]",
  }));
  ASSERT_EQ(events.size(), 6u) << dump(events);
  EXPECT_EQ(events[0], (StreamEvent{ToolInputStart{0, "g1", "glob"}}));
  EXPECT_EQ(events[1], (StreamEvent{ToolInputDelta{"g1", text}}));
  EXPECT_EQ(events[2], (StreamEvent{ToolInputStart{1, "g2", "list"}}));
  const auto& glob = std::get<ToolCall>(events[3]);
  EXPECT_EQ(glob.raw_input, text);
  EXPECT_TRUE(glob.input_valid);
  EXPECT_EQ(glob.input.as_object().at("pattern"), "*.txt");
  EXPECT_EQ(glob.input.as_object().at("opts").as_object().at("s"), "a\"b\\c\xC3\xA9\n");
  EXPECT_EQ(events[4], (StreamEvent{tool_call("g2", "list", "{}", "")}));
}

// Only choice 0 is read (n = 1); other choices, and entries that are not objects, are skipped
// whatever they hold. Numbers may come as doubles; a call's position in tool_calls is its index
// when it has none, counting the entries that are not objects.
TEST(OpenAIStream, OtherChoicesAreSkippedAndNumbersReadAsIntegers) {
  Events events = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[null,[{"index":0,"delta":{"content":"NOT 1"}}],{"index":1.0,"delta":{"content":"NOT 2","tool_calls":[{"index":0,"id":"z","function":{"name":"NOT"}}]},"finish_reason":"error"},{"index":0.0,"delta":{"content":"mine"}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[null,{"id":"c2","function":{"name":"f","arguments":"{\"a\""}}]}}]})",
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1.0,"function":{"arguments":":1}"}}]}}]})",
      R"({"choices":[{"index":2,"finish_reason":"length"},{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12.0,"completion_tokens":3,"completion_tokens_details":{"reasoning_tokens":1.0}}})",
      "[DONE]",
  }));
  Events expected = {
      TextDelta{"mine"},
      ToolInputStart{0, "c2", "f"},
      ToolInputDelta{"c2", "{\"a\""},
      ToolInputDelta{"c2", ":1}"},
      tool_call("c2", "f", R"({"a":1})", R"({"a":1})"),
      StepFinish{FinishReason::ToolCalls, Usage{.input = 12, .output = 2, .reasoning = 1},
                 "tool_calls"},
  };
  EXPECT_EQ(events, expected) << dump(events);
}

// Members nobody reads are skipped with everything in them, even where they hold keys the
// parser reads elsewhere.
TEST(OpenAIStream, UnknownMembersAreSkippedWhateverTheyHold) {
  std::string_view decoy =
      R"({"choices":[{"index":0,"delta":{"content":"NOT"},"finish_reason":"stop"}],"usage":{"prompt_tokens":999},"error":{"message":"NOT"},"object":"error","content":"NOT","function":{"name":"NOT","arguments":"NOT"},"deep":[[[{"a":[{"b":{}}]}]]]})";
  std::string d(decoy);
  Events events = parse_whole<OpenAIStreamParser>(data_events({
      R"({"extra":)" + d + R"(,"choices":[{"logprobs":)" + d + R"(,"index":0,"delta":{"audio":)" +
          d + R"(,"content":"yes","tool_calls":[{"extra":)" + d +
          R"(,"index":0,"id":"c1","function":{"meta":)" + d +
          R"(,"name":"f","arguments":"{}"}}]}}],"model":)" + d + "}",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})",
      "[DONE]",
  }));
  Events expected = {
      TextDelta{"yes"},
      ToolInputStart{0, "c1", "f"},
      ToolInputDelta{"c1", "{}"},
      tool_call("c1", "f", "{}", "{}"),
      StepFinish{FinishReason::ToolCalls, {}, "tool_calls"},
  };
  EXPECT_EQ(events, expected) << dump(events);
}

// Strings and keys the JSON parser hands over in parts (long, with escapes) are read whole.
TEST(OpenAIStream, LongEscapedStringsAndEscapedKeys) {
  std::string escaped, plain;
  for (int i = 0; i < 3000; ++i) {
    escaped += "\\u00e9\\n";
    plain += "\xC3\xA9\n";
  }
  std::string long_key(5000, 'k');
  Events events = parse_whole<OpenAIStreamParser>(data_events({
      R"({"choices":[{"index":0,"delta":{"con\u0074ent":")" + escaped + R"(","\u006b)" + long_key +
          R"(\n":{"content":"NOT"}}}]})",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})",
  }));
  EXPECT_EQ(events, (Events{TextDelta{plain}, StepFinish{FinishReason::Stop, {}, "stop"}}));
}

// A malformed chunk fails in parse_json's words; nesting is limited to 64 levels.
TEST(OpenAIStream, MalformedChunksFailInTheWordsOfParseJson) {
  for (std::string_view bad : {R"({"choices":[}])", R"({"choices":[]} x)", R"({"a":"\ud800"})",
                               R"({"a" 1})", "{\"a\":\"\xFF\"}"}) {
    Events events = parse_whole<OpenAIStreamParser>(data_events({bad}));
    ASSERT_EQ(events.size(), 1u) << bad << "\n" << dump(events);
    EXPECT_EQ(
        events[0],
        (StreamEvent{StreamError{
            "malformed chunk in the model stream: " + parse_json(bad).error().message, false}}))
        << bad;
  }
  auto nested = [](std::size_t arrays) {
    return R"({"choices":[],"x":)" + std::string(arrays, '[') + std::string(arrays, ']') + "}";
  };
  Events deepest = parse_whole<OpenAIStreamParser>(data_events({nested(63), "[DONE]"}));
  EXPECT_EQ(deepest, (Events{StepFinish{FinishReason::Stop, {}, ""}})) << dump(deepest);
  Events too_deep = parse_whole<OpenAIStreamParser>(data_events({nested(64), "[DONE]"}));
  ASSERT_EQ(too_deep.size(), 1u) << dump(too_deep);
  EXPECT_TRUE(Contains(std::get<StreamError>(too_deep[0]).message,
                       "nested deeper than the limit of 64 levels"))
      << dump(too_deep);
  for (std::string_view scalar : {"\"text\"", "[1]", "true", "null", "1.5"}) {
    Events events = parse_whole<OpenAIStreamParser>(data_events({scalar}));
    ASSERT_EQ(events.size(), 1u) << scalar;
    EXPECT_EQ(std::get<StreamError>(events[0]).message,
              "malformed chunk in the model stream: expected an object, got " +
                  std::string(kind_name(parse_json(scalar).value())))
        << scalar;
  }
}

// ---- OpenAI request --------------------------------------------------------------------------

ModelRequest sample_request() {
  ModelRequest r;
  r.model = "gpt-4o-mini";
  r.system = "You are terse.";
  r.messages = {
      ModelMessage::user("Read a.txt and list the dir"),
      ModelMessage::assistant(
          "Sure.", {ModelToolCall{"call_1", "read", parse_json(R"({"path":"a.txt"})").value()},
                    ModelToolCall{"call_2", "list", parse_json("{}").value()}}),
      ModelMessage::tool_result("call_1", "hello"),
      ModelMessage::tool_result("call_2", "permission denied", true),
      ModelMessage::user("Thanks"),
  };
  r.tools = {ToolSchema{"read", "Read a file",
                        parse_object(R"({"$schema":"http://json-schema.org/draft-07/schema#",
                                         "type":"object",
                                         "properties":{"path":{"type":"string"}},
                                         "required":["path"]})")},
             ToolSchema{"list", "List a directory", json::object{}}};
  r.max_tokens = 1000;
  r.temperature = 0.5;
  return r;
}

// The body the HTTP provider sends, parsed back.
json::object openai_body(const ModelRequest& r, const OpenAIRequestOptions& options = {}) {
  auto body = parse_json(serialize_openai_request(r, options));
  EXPECT_TRUE(body && body->is_object());
  return body && body->is_object() ? body->get_object() : json::object{};
}

TEST(OpenAIRequest, ProducesTheDocumentedShape) {
  json::object body = openai_body(sample_request());
  EXPECT_EQ(body.at("model"), "gpt-4o-mini");
  EXPECT_EQ(body.at("stream"), true);
  EXPECT_EQ(body.at("stream_options"), parse_json(R"({"include_usage":true})").value());
  EXPECT_EQ(body.at("max_tokens"), 1000);
  EXPECT_EQ(body.at("temperature"), 0.5);

  json::value expected_messages = parse_json(R"([
    {"role":"system","content":"You are terse."},
    {"role":"user","content":"Read a.txt and list the dir"},
    {"role":"assistant","content":"Sure.","tool_calls":[
      {"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.txt\"}"}},
      {"id":"call_2","type":"function","function":{"name":"list","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"hello"},
    {"role":"tool","tool_call_id":"call_2","content":"permission denied"},
    {"role":"user","content":"Thanks"}
  ])")
                                      .value();
  EXPECT_EQ(body.at("messages"), expected_messages) << json::serialize(body.at("messages"));

  json::value expected_tools = parse_json(R"([
    {"type":"function","function":{"name":"read","description":"Read a file","parameters":
      {"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}},
    {"type":"function","function":{"name":"list","description":"List a directory","parameters":
      {"type":"object","properties":{}}}}
  ])")
                                   .value();
  EXPECT_EQ(body.at("tools"), expected_tools) << json::serialize(body.at("tools"));
}

// What the HTTP provider sends: the same document as the builders make, the tools spliced in
// from the ToolSet's serialized copy, which later requests with the same set reuse.
TEST(RequestBody, SerializedBodyIsTheBuiltDocumentWithTheToolsMadeOnce) {
  ModelRequest r = sample_request();
  json::value anthropic = parse_json(serialize_anthropic_request(r)).value();
  EXPECT_EQ(anthropic, json::value(build_anthropic_request(r))) << json::serialize(anthropic);

  json::object first = openai_body(r);
  const std::string& tools = r.tools.serialized("openai", openai_tools);
  EXPECT_EQ(first.at("tools"), parse_json(tools).value());
  ModelRequest next = r;  // a later step: the same tools, one more message
  next.messages.push_back(ModelMessage::user("again"));
  EXPECT_EQ(&next.tools.serialized("openai", openai_tools), &tools);
  json::object again = openai_body(next);
  EXPECT_EQ(again.at("tools"), first.at("tools"));
  ASSERT_EQ(again.at("messages").as_array().size(), first.at("messages").as_array().size() + 1);
  EXPECT_EQ(again.at("messages").as_array().back(),
            parse_json(R"({"role":"user","content":"again"})").value());

  ModelRequest bare;
  bare.model = "m";
  bare.messages = {ModelMessage::user("hi")};
  json::object no_tools = openai_body(bare);
  EXPECT_FALSE(no_tools.contains("tools")) << json::serialize(no_tools);
}

// The conversation is sent again at every step: each message is written (escaped) once, kept
// with it, and later bodies reuse that text; text another format wrote is not reused.
TEST(OpenAIRequest, EachMessageIsWrittenOnceAndLaterStepsReuseIt) {
  ModelRequest r = sample_request();
  std::string first = serialize_openai_request(r, {});
  const ModelMessage& user = r.messages.front();
  EXPECT_EQ(user.wire.format, "openai");
  EXPECT_EQ(user.wire.text, R"({"role":"user","content":"Read a.txt and list the dir"})");
  const char* kept = user.wire.text.data();

  std::string again = serialize_openai_request(r, {});
  EXPECT_EQ(again, first);
  EXPECT_EQ(r.messages.front().wire.text.data(), kept);  // not written anew

  ModelMessage copy = r.messages.front();  // a copy may be edited: it starts without the text
  EXPECT_TRUE(copy.wire.format.empty() && copy.wire.text.empty());

  r.messages.back().wire.format = "anthropic";
  r.messages.back().wire.text = "not an OpenAI message";
  EXPECT_EQ(serialize_openai_request(r, {}), first);
  EXPECT_EQ(r.messages.back().wire.format, "openai");
}

// The body is written as text: every string of the conversation, whatever bytes it holds, comes
// back unchanged when the model's server parses it.
TEST(OpenAIRequest, EveryTextSurvivesTheTrip) {
  std::string nasty = "quote \" backslash \\ newline \n tab \t nul ";
  nasty.push_back('\0');
  nasty += " bell \x07 unicode caf\xc3\xa9 \xf0\x9f\x98\x80 </script>";
  ModelRequest r;
  r.model = "m\"odel";
  r.system = nasty;
  r.messages = {
      ModelMessage::user(nasty),
      ModelMessage::assistant(nasty, {ModelToolCall{nasty, nasty, json::object{{nasty, nasty}}}}),
      ModelMessage::tool_result(nasty, nasty)};
  json::object body = openai_body(r);
  EXPECT_EQ(body.at("model"), "m\"odel");
  const auto& messages = body.at("messages").as_array();
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[0].at("content").as_string(), nasty);
  EXPECT_EQ(messages[1].at("content").as_string(), nasty);
  EXPECT_EQ(messages[2].at("content").as_string(), nasty);
  const auto& call = messages[2].at("tool_calls").at(0);
  EXPECT_EQ(call.at("id").as_string(), nasty);
  EXPECT_EQ(call.at("function").at("name").as_string(), nasty);
  EXPECT_EQ(parse_json(call.at("function").at("arguments").as_string()).value(),
            json::value(json::object{{nasty, nasty}}));
  EXPECT_EQ(messages[3].at("tool_call_id").as_string(), nasty);
  EXPECT_EQ(messages[3].at("content").as_string(), nasty);
}

TEST(OpenAIRequest, OmitsWhatIsUnsetAndSendsInvalidHistoryInputAsEmptyObject) {
  ModelRequest r;
  r.model = "llama";
  r.messages = {ModelMessage::user("hi"),
                ModelMessage::assistant("", {ModelToolCall{"c", "read", json::value("{broken")}})};
  json::object body = openai_body(r);
  EXPECT_FALSE(body.contains("tools"));
  EXPECT_FALSE(body.contains("max_tokens"));
  EXPECT_FALSE(body.contains("temperature"));
  const json::array& messages = body.at("messages").as_array();
  ASSERT_EQ(messages.size(), 2u);  // no system message when the prompt is empty
  EXPECT_EQ(messages[1].at("content"), "");
  EXPECT_EQ(messages[1].at("tool_calls").at(0).at("function").at("arguments"), "{}");

  r.max_tokens = 50;
  json::object reasoning_model = openai_body(r, {.use_max_completion_tokens = true});
  EXPECT_EQ(reasoning_model.at("max_completion_tokens"), 50);
  EXPECT_FALSE(reasoning_model.contains("max_tokens"));
  EXPECT_TRUE(reasoning_model.contains("stream_options"));

  json::object no_usage = openai_body(r, {.include_usage = false});
  EXPECT_FALSE(no_usage.contains("stream_options"));
  EXPECT_EQ(no_usage.at("stream"), true);
}

// =================================================================================================
// Anthropic stream
// =================================================================================================

std::string anthropic_event(std::string_view type, std::string_view data) {
  return "event: " + std::string(type) + "\ndata: " + std::string(data) + "\n\n";
}

std::string anthropic_body(
    std::initializer_list<std::pair<std::string_view, std::string_view>> evs) {
  std::string body;
  for (auto [type, data] : evs)
    body += anthropic_event(type, data);
  return body;
}

const std::string kAnthropicToolStream = anthropic_body({
    {"message_start",
     R"({"type":"message_start","message":{"id":"msg_01X","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":10,"cache_read_input_tokens":2000,"output_tokens":2}}})"},
    {"content_block_start",
     R"({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}})"},
    {"ping", R"({"type": "ping"})"},
    {"content_block_delta",
     R"({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"I need the file."}})"},
    {"content_block_delta",
     R"({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}})"},
    {"content_block_stop", R"({"type":"content_block_stop","index":0})"},
    {"content_block_start",
     R"({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})"},
    {"content_block_delta",
     R"({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"I'll read it \u2014 "}})"},
    {"content_block_delta",
     R"({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"and list."}})"},
    {"content_block_stop", R"({"type":"content_block_stop","index":1})"},
    {"content_block_start",
     R"({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01A","name":"read","input":{}}})"},
    {"content_block_delta",
     R"({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}})"},
    {"content_block_delta",
     R"({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"path\": "}})"},
    {"content_block_delta",
     R"({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"src/a.txt\"}"}})"},
    {"content_block_stop", R"({"type":"content_block_stop","index":2})"},
    {"content_block_start",
     R"({"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_01B","name":"todoread","input":{}}})"},
    {"content_block_delta",
     R"({"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":""}})"},
    {"content_block_stop", R"({"type":"content_block_stop","index":3})"},
    {"message_delta",
     R"({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}})"},
    {"message_stop", R"({"type":"message_stop"})"},
});

TEST(AnthropicStream, ThinkingTextAndToolUseBlocks) {
  Events events = parse_whole<AnthropicStreamParser>(kAnthropicToolStream);
  Events expected = {
      ReasoningDelta{"I need the file."},
      TextDelta{"I'll read it \xE2\x80\x94 "},
      TextDelta{"and list."},
      ToolInputStart{0, "toolu_01A", "read"},
      ToolInputDelta{"toolu_01A", "{\"path\": "},
      ToolInputDelta{"toolu_01A", "\"src/a.txt\"}"},
      tool_call("toolu_01A", "read", R"({"path":"src/a.txt"})", R"({"path": "src/a.txt"})"),
      ToolInputStart{1, "toolu_01B", "todoread"},
      tool_call("toolu_01B", "todoread", "{}", ""),  // no partial JSON at all means {}
      StepFinish{FinishReason::ToolCalls,
                 Usage{.input = 472, .output = 89, .cache_read = 2000, .cache_write = 10},
                 "tool_use"},
  };
  EXPECT_EQ(events, expected) << dump(events);
}

TEST(AnthropicStream, SameEventsAtEverySplit) {
  EXPECT_TRUE(ParserSplitInvariant<AnthropicStreamParser>(kAnthropicToolStream));
}

TEST(AnthropicStream, EveryTruncationEndsWithExactlyOneTerminalEvent) {
  EXPECT_TRUE(EveryPrefixEndsWithOneTerminal<AnthropicStreamParser>(kAnthropicToolStream));
}

TEST(AnthropicStream, StreamCutMidToolUseIsAnError) {
  std::string_view body = kAnthropicToolStream;
  std::size_t cut = body.find("\\\"src/a.txt");
  ASSERT_NE(cut, std::string_view::npos);
  cut = body.rfind("event: ", cut);
  Events events = parse_whole<AnthropicStreamParser>(body.substr(0, cut));
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2], (StreamEvent{ToolInputDelta{"toolu_01A", "{\"path\": "}}));
  EXPECT_EQ(events.back(), (StreamEvent{StreamError{std::string(kStreamEndedEarly), true}}));
  for (auto& e : events)
    EXPECT_FALSE(std::holds_alternative<ToolCall>(e)) << describe(e);
}

TEST(AnthropicStream, StopReasonMapping) {
  struct Case {
    const char* wire;
    FinishReason expected;
  };
  for (auto [wire, expected] :
       {Case{"end_turn", FinishReason::Stop}, Case{"stop_sequence", FinishReason::Stop},
        Case{"max_tokens", FinishReason::Length},
        Case{"model_context_window_exceeded", FinishReason::Length},
        Case{"refusal", FinishReason::ContentFilter}, Case{"pause_turn", FinishReason::Other}}) {
    std::string delta = std::string(R"({"type":"message_delta","delta":{"stop_reason":")") + wire +
                        R"(","stop_sequence":null},"usage":{"output_tokens":7}})";
    std::string body = anthropic_body({
        {"message_start",
         R"({"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}})"},
        {"content_block_start",
         R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})"},
        {"content_block_delta",
         R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}})"},
        {"content_block_stop", R"({"type":"content_block_stop","index":0})"},
        {"message_delta", delta},
        {"message_stop", R"({"type":"message_stop"})"},
    });
    Events events = parse_whole<AnthropicStreamParser>(body);
    EXPECT_EQ(events,
              (Events{TextDelta{"x"}, StepFinish{expected, Usage{.input = 3, .output = 7}, wire}}))
        << wire << "\n"
        << dump(events);
  }
  // Tool use is covered by ThinkingTextAndToolUseBlocks.
}

TEST(AnthropicStream, CumulativeUsageInMessageDeltaWins) {
  Events events = parse_whole<AnthropicStreamParser>(anthropic_body({
      {"message_start",
       R"({"type":"message_start","message":{"usage":{"input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}})"},
      {"message_delta",
       R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":15,"cache_read_input_tokens":900,"cache_creation_input_tokens":0,"output_tokens":3}})"},
      {"message_stop", R"({"type":"message_stop"})"},
  }));
  EXPECT_EQ(events,
            (Events{StepFinish{FinishReason::Stop,
                               Usage{.input = 15, .output = 3, .cache_read = 900}, "end_turn"}}));
}

TEST(AnthropicStream, ErrorEvents) {
  std::string start = anthropic_event(
      "message_start", R"({"type":"message_start","message":{"usage":{"input_tokens":3}}})");
  Events overloaded = parse_whole<AnthropicStreamParser>(
      start +
      anthropic_event(
          "error",
          R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})"));
  EXPECT_EQ(overloaded, (Events{StreamError{"overloaded_error: Overloaded", true}}));

  Events invalid = parse_whole<AnthropicStreamParser>(anthropic_event(
      "error",
      R"({"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}})"));
  EXPECT_EQ(invalid, (Events{StreamError{"invalid_request_error: prompt is too long", false}}));
}

TEST(AnthropicStream, MalformedJsonIsAnErrorNotACrash) {
  AnthropicStreamParser parser;
  Events events;
  parser.feed(
      anthropic_event(
          "content_block_delta",
          R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"oops)") +
          anthropic_event("message_stop", R"({"type":"message_stop"})"),
      events);
  parser.finish(events);
  ASSERT_EQ(events.size(), 1u) << dump(events);
  const auto& error = std::get<StreamError>(events[0]);
  EXPECT_FALSE(error.retryable);
  EXPECT_TRUE(Contains(error.message, "malformed event"));
}

TEST(AnthropicStream, InputDeltaWithoutItsToolUseBlockIsAnError) {
  Events events = parse_whole<AnthropicStreamParser>(anthropic_event(
      "content_block_delta",
      R"({"type":"content_block_delta","index":4,"delta":{"type":"input_json_delta","partial_json":"{}"}})"));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(Contains(std::get<StreamError>(events[0]).message, "outside a tool_use block"));
}

TEST(AnthropicStream, UnknownEventsAreIgnoredAndMissingMessageStopAfterDeltaFinishes) {
  Events events = parse_whole<AnthropicStreamParser>(anthropic_body({
      {"content_block_start",
       R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":"Hi"}})"},
      {"brand_new_event", R"({"type":"brand_new_event","payload":[1,2,3]})"},
      {"content_block_delta",
       R"({"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{}}})"},
      {"content_block_stop", R"({"type":"content_block_stop","index":0})"},
      {"message_delta",
       R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}})"},
  }));
  EXPECT_EQ(events, (Events{TextDelta{"Hi"},
                            StepFinish{FinishReason::Stop, Usage{.output = 2}, "end_turn"}}));
}

TEST(AnthropicStream, InvalidToolInputIsFlagged) {
  Events events = parse_whole<AnthropicStreamParser>(anthropic_body({
      {"content_block_start",
       R"({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"bash","input":{}}})"},
      {"content_block_delta",
       R"({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"command\": tru"}})"},
      {"content_block_stop", R"({"type":"content_block_stop","index":0})"},
      {"message_delta", R"({"type":"message_delta","delta":{"stop_reason":"tool_use"}})"},
      {"message_stop", R"({"type":"message_stop"})"},
  }));
  ASSERT_EQ(events.size(), 4u) << dump(events);
  const auto& call = std::get<ToolCall>(events[2]);
  EXPECT_FALSE(call.input_valid);
  EXPECT_EQ(call.raw_input, "{\"command\": tru");
  EXPECT_FALSE(call.input_error.empty());
}

// ---- Anthropic request -----------------------------------------------------------------------

TEST(AnthropicRequest, ProducesTheDocumentedShape) {
  ModelRequest r = sample_request();
  r.model = "claude-sonnet-4-5";
  r.max_tokens.reset();
  r.messages.insert(r.messages.begin() + 1, ModelMessage::system("Be careful with files."));
  json::object body = build_anthropic_request(r);

  EXPECT_EQ(body.at("model"), "claude-sonnet-4-5");
  EXPECT_EQ(body.at("max_tokens"), kAnthropicDefaultMaxTokens);
  EXPECT_EQ(body.at("max_tokens"), 8192);
  EXPECT_EQ(body.at("stream"), true);
  EXPECT_EQ(body.at("temperature"), 0.5);
  EXPECT_EQ(body.at("system"), "You are terse.\n\nBe careful with files.");

  json::value expected_messages = parse_json(R"([
    {"role":"user","content":[{"type":"text","text":"Read a.txt and list the dir"}]},
    {"role":"assistant","content":[
      {"type":"text","text":"Sure."},
      {"type":"tool_use","id":"call_1","name":"read","input":{"path":"a.txt"}},
      {"type":"tool_use","id":"call_2","name":"list","input":{}}]},
    {"role":"user","content":[
      {"type":"tool_result","tool_use_id":"call_1","content":"hello"},
      {"type":"tool_result","tool_use_id":"call_2","content":"permission denied","is_error":true},
      {"type":"text","text":"Thanks"}]}
  ])")
                                      .value();
  EXPECT_EQ(body.at("messages"), expected_messages) << json::serialize(body.at("messages"));

  json::value expected_tools = parse_json(R"([
    {"name":"read","description":"Read a file","input_schema":
      {"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
       "properties":{"path":{"type":"string"}},"required":["path"]}},
    {"name":"list","description":"List a directory","input_schema":{"type":"object","properties":{}}}
  ])")
                                   .value();
  EXPECT_EQ(body.at("tools"), expected_tools) << json::serialize(body.at("tools"));
}

TEST(AnthropicRequest, MergesSameRoleTurnsPutsResultsFirstAndDropsEmptyText) {
  ModelRequest r;
  r.model = "claude";
  r.max_tokens = 100;
  r.messages = {
      ModelMessage::user("first"),
      ModelMessage::user("  \n"),  // blank: dropped
      ModelMessage::user("second"),
      ModelMessage::assistant("", {ModelToolCall{"t1", "bash", json::value("not an object")}}),
      ModelMessage::user("a remark typed while the tool ran"),
      ModelMessage::tool_result("t1", ""),
      ModelMessage::assistant(""),  // nothing at all: dropped
      ModelMessage::assistant("done"),
  };
  json::object body = build_anthropic_request(r);
  EXPECT_EQ(body.at("max_tokens"), 100);
  EXPECT_FALSE(body.contains("system"));
  EXPECT_FALSE(body.contains("tools"));
  EXPECT_FALSE(body.contains("temperature"));
  json::value expected = parse_json(R"([
    {"role":"user","content":[{"type":"text","text":"first"},{"type":"text","text":"second"}]},
    {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"bash","input":{}}]},
    {"role":"user","content":[
      {"type":"tool_result","tool_use_id":"t1"},
      {"type":"text","text":"a remark typed while the tool ran"}]},
    {"role":"assistant","content":[{"type":"text","text":"done"}]}
  ])")
                             .value();
  EXPECT_EQ(body.at("messages"), expected) << json::serialize(body.at("messages"));
}

// =================================================================================================
// Schema transforms
// =================================================================================================

TEST(SchemaTransform, OpenAIRemovesDollarSchemaEverywhereButKeepsAPropertyOfThatName) {
  json::object schema = parse_object(R"({
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
      "$schema": {"type": "string", "$schema": "x"},
      "items": {"type": "array", "items": {"$schema": "x", "type": "object",
                "properties": {"a": {"anyOf": [{"$schema": "x", "type": "string"}]}}}}
    },
    "$defs": {"d": {"$schema": "x", "type": "number"}}
  })");
  json::object out = openai_tool_schema(schema);
  json::value expected = parse_json(R"({
    "type": "object",
    "properties": {
      "$schema": {"type": "string"},
      "items": {"type": "array", "items": {"type": "object",
                "properties": {"a": {"anyOf": [{"type": "string"}]}}}}
    },
    "$defs": {"d": {"type": "number"}}
  })")
                             .value();
  EXPECT_EQ(json::value(out), expected) << json::serialize(out);
}

TEST(SchemaTransform, AddsTypeObjectAndProperties) {
  EXPECT_EQ(json::value(openai_tool_schema({})),
            parse_json(R"({"type":"object","properties":{}})").value());
  EXPECT_EQ(json::value(anthropic_tool_schema({})),
            parse_json(R"({"type":"object","properties":{}})").value());
  EXPECT_EQ(json::value(anthropic_tool_schema(
                parse_object(R"({"type":["object","null"],"properties":{"a":{}}})"))),
            parse_json(R"({"type":"object","properties":{"a":{}}})").value());
}

TEST(SchemaTransform, MergesTopLevelAlternatives) {
  // Either a path or a URL; "reason" in both. Only what every alternative requires stays required.
  json::object schema = parse_object(R"({
    "type": "object",
    "properties": {"reason": {"type": "string", "description": "top"}},
    "required": ["reason"],
    "anyOf": [
      {"properties": {"path": {"type": "string"}, "reason": {"type": "number"}}, "required": ["path", "mode"]},
      {"properties": {"url": {"type": "string"}}, "required": ["url", "mode"]}
    ]
  })");
  json::value expected = parse_json(R"({
    "type": "object",
    "properties": {"reason": {"type": "string", "description": "top"},
                   "path": {"type": "string"}, "url": {"type": "string"}},
    "required": ["reason", "mode"]
  })")
                             .value();
  EXPECT_EQ(json::value(anthropic_tool_schema(schema)), expected);
  EXPECT_EQ(json::value(openai_tool_schema(schema)), expected);

  // allOf: every requirement holds.
  json::object all = parse_object(R"({"allOf": [
      {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
      {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]})");
  EXPECT_EQ(json::value(anthropic_tool_schema(all)), parse_json(R"({
    "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
    "required": ["a", "b"], "type": "object"})")
                                                         .value());

  // OpenAI also refuses top-level enum / not; Anthropic keeps $schema.
  json::object odd = parse_object(
      R"({"$schema":"x","type":"object","enum":[{}],"not":{"required":["z"]},"properties":{}})");
  EXPECT_EQ(json::value(openai_tool_schema(odd)),
            parse_json(R"({"type":"object","properties":{}})").value());
  EXPECT_TRUE(anthropic_tool_schema(odd).contains("$schema"));
}

TEST(SchemaTransform, LeavesTheInputUntouched) {
  json::object schema = parse_object(R"({"$schema":"x","oneOf":[{"properties":{"a":{}}}]})");
  json::object copy = schema;
  (void)openai_tool_schema(schema);
  (void)anthropic_tool_schema(schema);
  EXPECT_EQ(schema, copy);
}

// =================================================================================================
// Robustness: damaged streams
// =================================================================================================

// Bytes flipped, dropped or duplicated anywhere in a valid stream: the parser must neither crash
// nor break its contract (exactly one terminal event, last). Deterministic (fixed seed); the
// libFuzzer target is the open-ended version of this.
template <class Parser>
void DamagedStreamsKeepTheContract(const std::string& body) {
  std::mt19937 rng(12345);
  const std::string noise = "{}[]\":,\\\n\r x0-e";
  for (int round = 0; round < 3000; ++round) {
    std::string damaged = body;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !damaged.empty(); ++e) {
      std::size_t at = rng() % damaged.size();
      switch (rng() % 3) {
        case 0:
          damaged[at] = noise[rng() % noise.size()];
          break;
        case 1:
          damaged.erase(at, 1 + rng() % 8);
          break;
        default:
          damaged.insert(at, damaged.substr(at, 1 + rng() % 16));
          break;
      }
    }
    Parser parser;
    Events events;
    std::size_t split = damaged.empty() ? 0 : rng() % damaged.size();
    parser.feed(std::string_view(damaged).substr(0, split), events);
    parser.feed(std::string_view(damaged).substr(split), events);
    parser.finish(events);
    std::size_t terminals = 0;
    for (const auto& ev : events)
      terminals += is_terminal(ev) ? 1 : 0;
    ASSERT_EQ(terminals, 1u) << "round " << round << "\n" << dump(events);
    ASSERT_TRUE(is_terminal(events.back())) << "round " << round << "\n" << dump(events);
    for (const auto& ev : events) {
      // Every call announced before it completes, whatever the damage.
      if (auto* call = std::get_if<ToolCall>(&ev)) {
        bool started = false;
        for (const auto& prior : events) {
          if (&prior == &ev) break;
          if (auto* s = std::get_if<ToolInputStart>(&prior); s && s->id == call->id) started = true;
        }
        ASSERT_TRUE(started) << "round " << round << "\n" << dump(events);
        ASSERT_EQ(call->input_valid, call->input.is_object()) << describe(ev);
      }
    }
  }
}

TEST(DamagedStreams, OpenAI) {
  DamagedStreamsKeepTheContract<OpenAIStreamParser>(kOpenAIToolStream);
  DamagedStreamsKeepTheContract<OpenAIStreamParser>(kOpenAITextStream);
}

TEST(DamagedStreams, Anthropic) {
  DamagedStreamsKeepTheContract<AnthropicStreamParser>(kAnthropicToolStream);
}

// =================================================================================================
// Shared pieces
// =================================================================================================

TEST(StreamEvents, DescribeIsOneReadableLine) {
  EXPECT_EQ(describe(TextDelta{"a\nb"}), "text \"a\\nb\"");
  EXPECT_EQ(
      describe(StepFinish{FinishReason::ToolCalls, Usage{.input = 1, .output = 2}, "tool_use"}),
      "finish tool-calls (tool_use) input=1 output=2 reasoning=0 cache_read=0 cache_write=0");
  ToolCall bad;
  bad.id = "c";
  bad.name = "n";
  bad.raw_input = "{";
  parse_tool_input(bad);
  EXPECT_TRUE(Contains(describe(bad), "tool-call c n invalid \"{\""));
  EXPECT_EQ(describe(StreamError{"boom", true}), "error (retryable) boom");
}

TEST(StreamEvents, NamesOfRolesAndFinishReasons) {
  EXPECT_EQ(role_name(Role::Tool), "tool");
  EXPECT_EQ(finish_reason_name(FinishReason::ToolCalls), "tool-calls");
  EXPECT_EQ(finish_reason_name(FinishReason::ContentFilter), "content-filter");
}

TEST(StreamEvents, ParseToolInputCases) {
  auto parsed = [](std::string raw) {
    ToolCall c;
    c.raw_input = std::move(raw);
    parse_tool_input(c);
    return c;
  };
  EXPECT_EQ(parsed("").input, json::value(json::object{}));
  EXPECT_EQ(parsed(" \n ").input, json::value(json::object{}));
  EXPECT_TRUE(parsed(R"({"a":[1,{"b":null}]})").input_valid);
  EXPECT_FALSE(parsed("null").input_valid);
  EXPECT_FALSE(parsed("\"just text\"").input_valid);  // a string that is not an encoded object
  EXPECT_FALSE(parsed("{} {}").input_valid);
  // Nesting deeper than any tool input is refused rather than parsed.
  EXPECT_FALSE(parsed(std::string(500, '[') + std::string(500, ']')).input_valid);
}

// ---- Files in user messages --------------------------------------------------------------------

Attachment attachment(Attachment::Kind kind, std::string mime, std::string name,
                      std::string base64) {
  return Attachment{kind, mime, std::move(name),
                    std::make_shared<const std::string>("data:" + mime + ";base64," + base64)};
}

// A user message with an image and a PDF (a text file reaches the model as the message's text).
ModelRequest request_with_files() {
  ModelRequest r;
  r.model = "m";
  r.messages = {ModelMessage::user(
      "What is in these?\n<file>\n00001| hello\n</file>",
      {attachment(Attachment::Kind::Image, "image/png", "one.png", "iVBORw0KGgo="),
       attachment(Attachment::Kind::Pdf, "application/pdf", "a.pdf", "JVBERi0xLjQK")})};
  return r;
}

TEST(OpenAIRequest, FilesGoAsContentPartsBeforeTheText) {
  json::object body = openai_body(request_with_files());
  EXPECT_EQ(body.at("messages"), parse_json(R"([{"role":"user","content":[
      {"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},
      {"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0xLjQK"}},
      {"type":"text","text":"What is in these?\n<file>\n00001| hello\n</file>"}]}])")
                                     .value())
      << json::serialize(body.at("messages"));
}

TEST(AnthropicRequest, FilesGoAsImageAndDocumentBlocksBeforeTheText) {
  json::object body = build_anthropic_request(request_with_files());
  EXPECT_EQ(body.at("messages"), parse_json(R"([{"role":"user","content":[
      {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},
      {"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0xLjQK"},
       "title":"a.pdf"},
      {"type":"text","text":"What is in these?\n<file>\n00001| hello\n</file>"}]}])")
                                     .value())
      << json::serialize(body.at("messages"));
}

// A file in the history that this request's model does not take (another model's turn) goes as
// a note; OpenAI's kept text for the message is left for a model that takes it.
TEST(RequestBody, FilesAModelDoesNotTakeAreNotesInstead) {
  ModelRequest r = request_with_files();
  std::string full = serialize_openai_request(r);
  r.input = InputKinds{.image = true, .pdf = false};
  std::string note = r.messages[0].attachments[1].refused_note();
  EXPECT_NE(note.find("a PDF (a.pdf), which this model cannot read"), std::string::npos);
  json::object body = openai_body(r);
  const auto& content = body.at("messages").at(0).at("content").as_array();
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[1], parse_json(R"({"type":"text","text":")" + note + R"("})").value());
  r.input = {};
  EXPECT_EQ(serialize_openai_request(r), full);

  r.input = InputKinds{.image = false, .pdf = true};
  json::object anthropic = build_anthropic_request(r);
  const auto& blocks = anthropic.at("messages").at(0).at("content").as_array();
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0].at("type"), "text");
  EXPECT_EQ(blocks[1].at("type"), "document");
}

// The history is copied between steps without copying the files' bytes.
TEST(RequestBody, CopiesOfAMessageShareItsFiles) {
  ModelRequest r = request_with_files();
  ModelMessage copy = r.messages[0];
  EXPECT_EQ(copy.attachments[0].data_url.get(), r.messages[0].attachments[0].data_url.get());
  EXPECT_EQ(copy, r.messages[0]);
}

}  // namespace
}  // namespace sb::provider

namespace sb::provider {
namespace {

// The start-up log says where a provider is, never the credentials in its URL.
TEST(LoadProviders, TheStartUpNoteHidesCredentialsInTheBaseUrl) {
  json::object config = json::parse(R"({"provider": {"oa": {"type": "openai-compatible",
      "baseURL": "https://user:secret@example.com/v1?key=abc", "models": ["m"]}}})")
                            .as_object();
  auto set = load_providers(config, [](const std::string&) { return std::string(); });
  ASSERT_TRUE(set) << set.error().message;
  bool noted = false;
  for (const auto& note : set->notes) {
    EXPECT_EQ(note.find("secret"), std::string::npos) << note;
    EXPECT_EQ(note.find("abc"), std::string::npos) << note;
    noted = noted || note.find("example.com/v1") != std::string::npos;
  }
  EXPECT_TRUE(noted) << "no note names the provider's host";
}

}  // namespace
}  // namespace sb::provider
