#include "data/line_fields.h"

#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::data {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> Fields(const LineFields& f) {
  return {f.fields().begin(), f.fields().end()};
}
std::vector<std::string> Raw(const LineFields& f) {
  return {f.raw().begin(), f.raw().end()};
}

TEST(LineFieldsTest, UnquotedLinesSplitAtEverySeparator) {
  LineFields f;
  ASSERT_OK(f.Split("1\t2\t\tx", '\t'));
  EXPECT_THAT(Fields(f), ElementsAre("1", "2", "", "x"));
  EXPECT_THAT(Raw(f), ElementsAre("1", "2", "", "x"));
  ASSERT_OK(f.Split("", ','));
  EXPECT_THAT(Fields(f), ElementsAre(""));
  ASSERT_OK(f.Split("a,", ','));
  EXPECT_THAT(Fields(f), ElementsAre("a", ""));
}

TEST(LineFieldsTest, QuotedFieldsAreUnquoted) {
  LineFields f;
  // R's write.csv: every text field quoted.
  ASSERT_OK(f.Split(R"("label","count","a1","x|y")", ','));
  EXPECT_THAT(Fields(f), ElementsAre("label", "count", "a1", "x|y"));
  EXPECT_THAT(Raw(f),
              ElementsAre("\"label\"", "\"count\"", "\"a1\"", "\"x|y\""));
  // A separator inside quotes is text; Spark's "" is an empty field.
  ASSERT_OK(f.Split(R"(1,"a,b",,"",3)", ','));
  EXPECT_THAT(Fields(f), ElementsAre("1", "a,b", "", "", "3"));
  // The last field quoted, and a quoted field ending the line after a
  // separator.
  ASSERT_OK(f.Split(R"(1,"")", ','));
  EXPECT_THAT(Fields(f), ElementsAre("1", ""));
}

TEST(LineFieldsTest, DoubledQuotesAreOneQuote) {
  LineFields f;
  ASSERT_OK(f.Split(R"("say ""hi""",x,"""",y)", ','));
  EXPECT_THAT(Fields(f), ElementsAre("say \"hi\"", "x", "\"", "y"));
  EXPECT_THAT(Raw(f), ElementsAre(R"("say ""hi""")", "x", R"("""")", "y"));
  // Views stay valid across several unescaped fields of a long line.
  std::string line;
  for (int i = 0; i < 200; ++i) line += "\"a\"\"b\",";
  line += "end";
  ASSERT_OK(f.Split(line, ','));
  ASSERT_EQ(f.size(), 201u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(f[i], "a\"b") << i;
  EXPECT_EQ(f[200], "end");
}

TEST(LineFieldsTest, AQuoteInsideAnUnquotedFieldIsText) {
  LineFields f;
  ASSERT_OK(f.Split("ab\"c,d", ','));
  EXPECT_THAT(Fields(f), ElementsAre("ab\"c", "d"));
}

TEST(LineFieldsTest, BadQuotingIsRefusedNamingTheColumn) {
  LineFields f;
  EXPECT_THAT(f.Split(R"(1,"open,2)", ','),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("column 1: its opening quote is not closed")));
  EXPECT_THAT(Fields(f), IsEmpty());
  EXPECT_THAT(f.Split(R"(1,2,"a"b,3)", ','),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("column 2: text after its closing quote")));
  EXPECT_THAT(Fields(f), IsEmpty());
  EXPECT_THAT(f.Split("\"", '\t'), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("column 0")));
}

}  // namespace
}  // namespace embedps::data
