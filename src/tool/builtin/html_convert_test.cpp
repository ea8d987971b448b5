// Tests of the HTML to text and HTML to Markdown conversions behind webfetch: what a model reads
// for common page structures, and what it must never read (scripts, styles, hidden parts).
#include "tool/builtin/html_convert.hpp"

#include <gtest/gtest.h>

#include <string>

#include "tool/tool_test_helpers.hpp"

namespace sb::tool {
namespace {

using testing::Contains;

std::string md(const std::string& html, const std::string& base = {}) {
  return html_to_markdown(html, HtmlConvertOptions{base, {}});
}
std::string text(const std::string& html) {
  return html_to_text(html);
}

TEST(HtmlToText, KeepsVisibleTextOnly) {
  std::string html = R"(<!doctype html><html><head><title>T</title>
    <style>body { color: red }</style><script>var secret = 1;</script></head>
    <body><h1>Hello</h1><p>First   paragraph
    with <b>bold</b> text.</p><noscript>enable js</noscript>
    <div hidden>hidden div</div><template><p>tpl</p></template>
    <p>Second</p><script>alert("x")</script></body></html>)";
  EXPECT_EQ(text(html), "Hello\n\nFirst paragraph with bold text.\n\nSecond");
}

TEST(HtmlToText, BlocksListsAndTables) {
  std::string html = R"(<div>one</div><div>two</div><ul><li>a</li><li>b</li></ul>
    <table><tr><th>k</th><th>v</th></tr><tr><td>x</td><td>1</td></tr></table>)";
  EXPECT_EQ(text(html), "one\ntwo\n\na\nb\n\nk\tv\nx\t1");
}

TEST(HtmlToText, PreKeepsItsLayout) {
  std::string html = "<p>before</p><pre>\nline 1\n  indented  line\n\nlast</pre><p>after</p>";
  EXPECT_EQ(text(html), "before\n\nline 1\n  indented  line\n\nlast\n\nafter");
}

TEST(HtmlToText, DecodesEntitiesAndCollapsesNoBreakSpaces) {
  EXPECT_EQ(text("<p>a &amp; b &lt;c&gt;&nbsp;&nbsp;d &eacute;&#8364;</p>"),
            "a & b <c> d \xC3\xA9\xE2\x82\xAC");
}

TEST(HtmlToText, ToleratesBrokenMarkup) {
  // Unclosed tags, stray end tags, unknown HTML5 elements: parsed as a browser would.
  std::string html = "<section><p>one<p>two</span></div><custom-el>three</custom-el>";
  std::string out = text(html);
  EXPECT_TRUE(Contains(out, "one"));
  EXPECT_TRUE(Contains(out, "two"));
  EXPECT_TRUE(Contains(out, "three"));
  EXPECT_EQ(text(""), "");
}

TEST(HtmlToText, CharsetFromOptionsAndFromMeta) {
  // Latin-1 bytes: "caf\xE9".
  EXPECT_EQ(html_to_text("<p>caf\xE9</p>", HtmlConvertOptions{{}, "iso-8859-1"}), "caf\xC3\xA9");
  EXPECT_EQ(html_to_text("<html><head><meta charset=\"iso-8859-1\"></head><body><p>caf\xE9</p>"),
            "caf\xC3\xA9");
  // Valid UTF-8 without a declaration is taken as UTF-8, not Latin-1.
  EXPECT_EQ(html_to_text("<p>caf\xC3\xA9</p>"), "caf\xC3\xA9");
}

TEST(HtmlToMarkdown, HeadingsParagraphsAndEmphasis) {
  std::string html = R"(<h1>Title</h1><p>Some <strong>bold</strong>, <em>italic</em> and
    <code>x = 1</code> text.</p><h3>Sub <a href="/s">section</a></h3><p>End<br>next line</p>)";
  EXPECT_EQ(md(html),
            "# Title\n\nSome **bold**, *italic* and `x = 1` text.\n\n### Sub [section](/s)\n\n"
            "End\nnext line");
}

TEST(HtmlToMarkdown, LinksAreResolvedAgainstThePage) {
  std::string html = R"(<p><a href="/docs/a.html">A</a> <a href="b.html">B</a>
    <a href="https://other.example/x">C</a> <a href="#top">D</a>
    <a href="javascript:void 0">E</a> <a href="/empty"></a>
    <a href="/s p">F</a> <img src="/img/logo.png" alt="Logo"></p>)";
  std::string out = md(html, "https://example.com/dir/page.html");
  EXPECT_TRUE(Contains(out, "[A](https://example.com/docs/a.html)"));
  EXPECT_TRUE(Contains(out, "[B](https://example.com/dir/b.html)"));
  EXPECT_TRUE(Contains(out, "[C](https://other.example/x)"));
  EXPECT_TRUE(Contains(out, "[D](https://example.com/dir/page.html#top)"));
  EXPECT_TRUE(Contains(out, " E "));  // a javascript: link keeps its text, loses the link
  EXPECT_FALSE(Contains(out, "javascript"));
  EXPECT_FALSE(Contains(out, "/empty"));  // nothing to click on: dropped
  EXPECT_TRUE(Contains(out, "![Logo](https://example.com/img/logo.png)"));
  // Without a base URL, links stay as written.
  EXPECT_TRUE(Contains(md(R"(<a href="/x">X</a>)"), "[X](/x)"));
}

TEST(HtmlToMarkdown, BaseElementChangesTheBase) {
  std::string html =
      R"(<html><head><base href="https://cdn.example/root/"></head><body><a href="f">F</a>)";
  EXPECT_EQ(md(html, "https://example.com/page"), "[F](https://cdn.example/root/f)");
}

TEST(HtmlToMarkdown, LinkTextSpacingFollowsTheSource) {
  EXPECT_EQ(md(R"(<p>see<a href="/a"> the docs </a>now</p>)"), "see [the docs](/a) now");
  EXPECT_EQ(md(R"(<p>x<b>y</b>z</p>)"), "x**y**z");
  // A card link wrapping blocks becomes one line of link text.
  EXPECT_EQ(md(R"(<a href="/c"><div><h3>Card</h3><p>Body text</p></div></a>)"),
            "[Card Body text](/c)");
}

TEST(HtmlToMarkdown, Lists) {
  std::string html = R"(<ul><li>one</li><li>two<ul><li>nested</li></ul></li></ul>
    <ol start="3"><li>three</li><li>four</li></ol>)";
  EXPECT_EQ(md(html), "- one\n- two\n  - nested\n\n3. three\n4. four");
}

TEST(HtmlToMarkdown, CodeBlocks) {
  std::string html = R"(<p>Run:</p><pre><code class="language-cpp">int main() {
  return 0;
}
</code></pre><p>Inline <code>a`b</code>.</p>)";
  EXPECT_EQ(md(html), "Run:\n\n```cpp\nint main() {\n  return 0;\n}\n```\n\nInline `` a`b ``.");
  // Backticks in the code make the fence longer.
  EXPECT_EQ(md("<pre>```\nx\n```</pre>"), "````\n```\nx\n```\n````");
}

TEST(HtmlToMarkdown, BlockquotesAndRules) {
  std::string html = "<blockquote><p>quoted</p><p>twice</p></blockquote><hr><p>after</p>";
  EXPECT_EQ(md(html), "> quoted\n>\n> twice\n\n---\n\nafter");
}

TEST(HtmlToMarkdown, Tables) {
  std::string html = R"(<table><thead><tr><th>Name</th><th>Value</th></tr></thead>
    <tbody><tr><td>a|b</td><td><a href="/v">v</a></td></tr><tr><td>only</td></tr></tbody>
    </table>)";
  EXPECT_EQ(md(html), "| Name | Value |\n| --- | --- |\n| a\\|b | [v](/v) |\n| only |  |");
  // A one-column layout table is just its content.
  EXPECT_EQ(md("<table><tr><td><p>para</p></td></tr><tr><td>cell</td></tr></table>"),
            "para\n\ncell");
}

TEST(HtmlToMarkdown, DropsInvisibleContent) {
  std::string html = R"(<head><title>T</title><style>p{}</style></head><body>
    <script>let x = "<p>fake</p>";</script><p>real</p><svg><text>svg text</text></svg>
    <form><input value="v"><button>Go</button><select><option>o</option></select></form>
    <iframe src="x">frame</iframe></body>)";
  EXPECT_EQ(md(html), "real");
}

TEST(HtmlToMarkdown, ImagesWithoutUsefulSourceAreDropped) {
  EXPECT_EQ(md(R"(<p>a<img src="data:image/png;base64,AAAA" alt="x">b</p>)"), "ab");
  EXPECT_EQ(md(R"(<img src="data:," data-src="/real.png" alt="r">)"), "![r](/real.png)");
}

TEST(LooksLikeHtml, Detection) {
  EXPECT_TRUE(looks_like_html("  \n<!DOCTYPE html><html>"));
  EXPECT_TRUE(looks_like_html("\xEF\xBB\xBF<html lang=en>"));
  EXPECT_TRUE(looks_like_html("<HEAD>"));
  EXPECT_FALSE(looks_like_html("{\"a\": 1}"));
  EXPECT_FALSE(looks_like_html("plain <b>text</b>"));
}

}  // namespace
}  // namespace sb::tool
