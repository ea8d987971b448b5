#!/usr/bin/env node
// An MCP test server built on the v2 SDK (@modelcontextprotocol/server 2.4.0), which speaks the
// stateless 2026-07-28 revision (server/discover, a _meta envelope on every request,
// input_required results, subscriptions/listen) and, from the same tool definitions, the
// 2025-era initialize handshake. The MCP client tests run it; README.md beside it says what it
// answers, with exact transcripts.
//
//   node modern_server.mjs              stdio (one JSON-RPC message per line)
//   node modern_server.mjs --http PORT  Streamable HTTP on 127.0.0.1:PORT at /mcp; prints
//                                       "listening on PORT" to stderr when ready (PORT 0 = any
//                                       free port, the real one is printed)
import http from "node:http";
import { createMcpHandler, inputRequired, inputResponse, McpServer } from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";
import * as z from "zod";

// A 1x1 red PNG.
const PNG_1X1 =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

const args = process.argv.slice(2);
const httpIndex = args.indexOf("--http");
const httpPort = httpIndex >= 0 ? Number(args[httpIndex + 1]) : undefined;
if (httpIndex >= 0 && !(Number.isInteger(httpPort) && httpPort >= 0 && httpPort < 65536)) {
  process.stderr.write("usage: modern_server.mjs [--http PORT]\n");
  process.exit(2);
}

// Tools added with add_tool, kept for the life of the process: over HTTP every request is served
// by a fresh server instance from the factory, so the factory registers these again each time.
const addedTools = new Set();
// Over HTTP, the handler's subscriptions/listen bus; set once the handler exists.
let httpHandler;

function text(value) {
  return { content: [{ type: "text", text: value }] };
}

function registerAddedTool(server, name) {
  server.registerTool(
    name,
    { description: `A tool added at run time by add_tool`, inputSchema: z.object({}) },
    async () => text(`this is ${name}`),
  );
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

function createServer() {
  const server = new McpServer(
    { name: "switchboard-modern-test-server", version: "1.0.0" },
    { capabilities: { tools: { listChanged: true } } },
  );

  server.registerTool(
    "echo",
    { description: "Returns its text", inputSchema: z.object({ text: z.string() }) },
    async ({ text: value }) => text(value),
  );

  server.registerTool(
    "slow",
    {
      description: "Counts steps, ms apart, with a progress notification per step; stops when cancelled",
      inputSchema: z.object({
        steps: z.number().int().min(0).max(10000),
        ms: z.number().int().min(0).max(60000),
      }),
    },
    async ({ steps, ms }, ctx) => {
      const token = ctx.mcpReq._meta?.progressToken;
      const signal = ctx.mcpReq.signal;
      let done = 0;
      for (let step = 1; step <= steps; ++step) {
        await sleep(ms, signal);
        if (signal.aborted) break;
        done = step;
        if (token !== undefined) {
          await ctx.mcpReq.notify({
            method: "notifications/progress",
            params: { progressToken: token, progress: step, total: steps, message: `step ${step}` },
          });
        }
      }
      if (signal.aborted) process.stderr.write(`slow: cancelled after ${done} steps\n`);
      return text(`done after ${done} steps`);
    },
  );

  server.registerTool(
    "add_tool",
    {
      description: "Registers a new tool NAME, so the server announces notifications/tools/list_changed",
      inputSchema: z.object({ name: z.string() }),
    },
    async ({ name }) => {
      if (addedTools.has(name) || name === "add_tool") return text(`already there: ${name}`);
      addedTools.add(name);
      if (httpHandler) {
        // HTTP: this instance lives for one request; the next ones build the tool from
        // addedTools, and the open subscriptions/listen streams hear of the change.
        httpHandler.notify.toolsChanged();
      } else {
        // stdio: the instance is the connection's for good; registering sends the
        // notification (routed onto subscriptions/listen on a 2026-07-28 connection).
        registerAddedTool(server, name);
      }
      return text(`added ${name}`);
    },
  );

  server.registerTool(
    "ask",
    {
      description: "Asks the user a question (elicitation, by input_required) and returns the answer",
      inputSchema: z.object({ question: z.string() }),
    },
    async ({ question }, ctx) => {
      const response = inputResponse(ctx.mcpReq.inputResponses, "answer");
      if (response.kind === "elicit") {
        if (response.action === "accept") return text(`you said: ${response.content?.answer}`);
        return text("declined");
      }
      return inputRequired({
        inputRequests: {
          answer: inputRequired.elicit({
            message: question,
            requestedSchema: z.object({ answer: z.string() }),
          }),
        },
      });
    },
  );

  server.registerTool(
    "picture",
    { description: "Returns a 1x1 PNG and a caption", inputSchema: z.object({}) },
    async () => ({
      content: [
        { type: "image", data: PNG_1X1, mimeType: "image/png" },
        { type: "text", text: "a 1x1 red pixel" },
      ],
    }),
  );

  server.registerTool(
    "fail",
    { description: "Always fails (isError)", inputSchema: z.object({}) },
    async () => ({ isError: true, content: [{ type: "text", text: "this tool always fails" }] }),
  );

  server.registerTool(
    "structured",
    {
      description: "Returns structuredContent {n: 42} and no text",
      inputSchema: z.object({}),
      outputSchema: z.object({ n: z.number() }),
    },
    async () => ({ structuredContent: { n: 42 } }),
  );

  for (const name of addedTools) registerAddedTool(server, name);
  return server;
}

if (httpPort === undefined) {
  serveStdio(() => createServer(), {
    onerror: (error) => process.stderr.write(`modern_server: ${error.message}\n`),
  });
} else {
  httpHandler = createMcpHandler(() => createServer(), {
    onerror: (error) => process.stderr.write(`modern_server: ${error.message}\n`),
  });
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, `http://${req.headers.host ?? "127.0.0.1"}`);
    if (url.pathname !== "/mcp") {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    const abort = new AbortController();
    res.on("close", () => abort.abort());
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    const headers = new Headers();
    for (const [key, value] of Object.entries(req.headers)) {
      if (Array.isArray(value)) for (const v of value) headers.append(key, v);
      else if (value !== undefined) headers.set(key, value);
    }
    const request = new Request(url, {
      method: req.method,
      headers,
      body: req.method === "GET" || req.method === "HEAD" || body.length === 0 ? undefined : body,
      signal: abort.signal,
    });
    let response;
    try {
      response = await httpHandler.fetch(request);
    } catch (error) {
      process.stderr.write(`modern_server: ${error.message}\n`);
      if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" }).end("internal error\n");
      return;
    }
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (!response.body) {
      res.end();
      return;
    }
    try {
      for await (const chunk of response.body) res.write(chunk);
    } catch {
      // the client went away mid-stream
    }
    res.end();
  });
  server.listen(httpPort, "127.0.0.1", () => {
    process.stderr.write(`listening on ${server.address().port}\n`);
  });
}
