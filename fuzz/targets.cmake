# The libFuzzer targets: fuzz/NAME.cpp becomes fuzz_NAME, with its seed corpus in
# fuzz/corpus/NAME/. Shared by fuzz/CMakeLists.txt (which builds them with clang) and
# cmake/fuzz.cmake (which runs each for a short while as a CTest test of the main build).
set(SWITCHBOARD_FUZZERS
  sse_decoder       # provider/sse_decoder: every model stream's bytes
  openai_stream     # provider/openai: OpenAI-compatible streams
  anthropic_stream  # provider/anthropic: Anthropic streams
  config            # config files, provider/agent/permission sections
  client_tools      # tool specs, JSON Schemas and inputs, result bodies
  sdk_sse           # the C++ SDK's event-stream parser
  http_server       # the whole edge in process: HTTP requests, route bodies, WebSocket messages
  mcp_stdio         # mcp/framing + jsonrpc: what an MCP server writes on its stdout
  chat_request      # server/decode: an AI SDK chat request (POST /api/chat, a chat WebSocket's send)
)
