// Regression tests for what fuzz/ found in the server's request handling, run on the plain
// functions the gateway calls (no server needed). The inputs are also in fuzz/corpus/.
#include <gtest/gtest.h>

#include <string>

#include "server/rest_request.h"

namespace mixserve::testing {
namespace {

// fuzz/corpus/rest_request/number-overflow.json: nlohmann reports a number beyond double's range
// as out_of_range, not parse_error; it escaped the parser and the gateway answered 500.
TEST(RequestParsing, NumberBeyondDoubleIsInvalidJsonNotAnInternalError) {
  for (const char* body : {R"({"prompt":"a","temperature":1e400})",
                           R"({"prompt":"a","max_tokens":-1e999})", R"([1e309])"}) {
    CompletionRequest out;
    std::optional<ApiError> e;
    EXPECT_NO_THROW(e = parse_completion_body(body, out)) << body;
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->code, ApiCode::kInvalidArgument) << body;
    EXPECT_NE(e->message.find("not valid JSON"), std::string::npos) << e->message;
  }
}

// fuzz/corpus/grpc_request/tiny-repetition-penalty.bin: gRPC accepted repetition_penalty 1e-38
// (the engine's and docs/api.md's range is (0, 10]) while REST refused anything below 1e-6.
TEST(RequestParsing, RepetitionPenaltyRangeIsTheDocumentedOne) {
  CompletionRequest out;
  EXPECT_FALSE(parse_completion_body(R"({"prompt":"a","repetition_penalty":1e-38})", out));
  EXPECT_FLOAT_EQ(out.api.params.sampling.repetition_penalty, 1e-38f);
  EXPECT_FALSE(parse_completion_body(R"({"prompt":"a","repetition_penalty":10})", out));
  for (const char* bad :
       {R"({"prompt":"a","repetition_penalty":0})", R"({"prompt":"a","repetition_penalty":1e-50})",
        R"({"prompt":"a","repetition_penalty":-1})",
        R"({"prompt":"a","repetition_penalty":10.5})"}) {
    auto e = parse_completion_body(bad, out);
    ASSERT_TRUE(e.has_value()) << bad;
    EXPECT_EQ(e->param, "repetition_penalty") << bad;
  }
}

}  // namespace
}  // namespace mixserve::testing
