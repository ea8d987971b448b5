#pragma once
// HTML to text and HTML to Markdown, for the webfetch tool. The HTML is parsed with libxml2's
// HTML parser (error-tolerant, as browsers are: unclosed tags, stray end tags and unknown HTML5
// elements are fine), then the tree is rendered.
//
// Both renderings drop what a reader never sees: <head>, <script>, <style>, <noscript>,
// <template>, <iframe>, <object>, <embed>, <svg>, <canvas>, form controls, and elements with the
// `hidden` attribute. Whitespace is collapsed as a browser does, except inside <pre>.
//
// Stateless and thread-safe (libxml2 is initialised once, on first use).
#include <string>
#include <string_view>

namespace sb::tool {

struct HtmlConvertOptions {
  // The page's URL: relative links and image sources are resolved against it (and against a
  // <base href> in the page). Empty: links are left as written.
  std::string base_url;
  // The charset the server declared (Content-Type: ...; charset=X). Empty: UTF-8 when the bytes
  // are valid UTF-8, else whatever the page's <meta charset> says.
  std::string charset;
};

// The visible text: one line per block (paragraph, heading, list item, table row; table cells
// separated by a tab), a blank line between paragraphs, <pre> kept as written.
std::string html_to_text(std::string_view html, const HtmlConvertOptions& options = {});

// Markdown: headings (#), paragraphs, links [text](href), images ![alt](src), emphasis (** * ~~),
// inline `code` and fenced code blocks (with the language of a class="language-x"), ordered and
// unordered lists (nested by indentation), block quotes (>), rules (---) and tables (pipes).
std::string html_to_markdown(std::string_view html, const HtmlConvertOptions& options = {});

// Whether `body` looks like an HTML document (for responses without a useful Content-Type):
// it starts, after whitespace and a BOM, with <!doctype html, <html, <head or <body.
bool looks_like_html(std::string_view body);

}  // namespace sb::tool
