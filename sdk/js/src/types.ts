// The server's JSON shapes (docs/api.md). Field names are the server's own.

/** A JSON Schema object for a tool's input; its top-level `type`, when given, must be "object". */
export type JSONSchema = { [key: string]: unknown };

export type JSONObject = { [key: string]: unknown };

// ---- client tools ------------------------------------------------------------------------------

/** What the server sends a client to run one of its tools. */
export interface ClientToolRequest {
  type: 'client-tool-request';
  requestID: string;
  sessionID: string;
  messageID: string;
  callID: string;
  /** The full tool id, `client_{clientID}_{name}`. */
  tool: string;
  input: JSONObject;
}

/** A successful result as sent to the server. */
export interface ClientToolSuccess {
  status: 'success';
  title: string;
  output: string;
  metadata?: JSONObject;
  attachments?: unknown[];
}

export interface ClientToolFailure {
  status: 'error';
  error: string;
}

export type ClientToolResponse = ClientToolSuccess | ClientToolFailure;

/** A tool as the server lists it. */
export interface ToolInfo {
  id: string;
  description: string;
  parameters: JSONSchema;
  interactive?: boolean;
  sessionID?: string;
}

// ---- sessions, messages, parts -----------------------------------------------------------------

export interface PermissionRule {
  permission: string;
  pattern: string;
  action: 'allow' | 'ask' | 'deny';
}

export interface Session {
  id: string;
  title: string;
  directory: string;
  version: string;
  parentID?: string;
  clientID?: string;
  permission?: PermissionRule[];
  /** What a person allowed with an "always" reply in this session (kept with it). */
  approved?: PermissionRule[];
  time: { created: number; updated: number };
}

export interface TokenUsage {
  input: number;
  output: number;
  reasoning: number;
  cache: { read: number; write: number };
}

/** A turn's failure as stored on its assistant message (`ProviderAuthError`, `APIError`, ...). */
export interface NamedError {
  name: string;
  data: { message: string; [key: string]: unknown };
}

export interface UserMessageInfo {
  id: string;
  sessionID: string;
  role: 'user';
  time: { created: number; completed?: number };
  agent: string;
  model: { providerID: string; modelID: string };
}

export interface AssistantMessageInfo {
  id: string;
  sessionID: string;
  role: 'assistant';
  time: { created: number; completed?: number };
  agent: string;
  parentID: string;
  providerID: string;
  modelID: string;
  mode: string;
  path: { cwd: string; root: string };
  cost: number;
  tokens: TokenUsage;
  finish?: string;
  error?: NamedError;
  /** The summary of the conversation before it (`POST /session/{id}/summarize`); agent `compaction`. */
  summary?: true;
}

export type MessageInfo = UserMessageInfo | AssistantMessageInfo;

interface PartBase {
  id: string;
  sessionID: string;
  messageID: string;
}

export interface TextPart extends PartBase {
  type: 'text' | 'reasoning';
  text: string;
  /** Absent on a user's text. */
  time?: { start: number; end?: number };
  /** Written by the server, not the person (what the model read of an attached text file). */
  synthetic?: boolean;
}

/** A file of a user message: an image's or PDF's `url` is a `data:` URL. */
export interface FilePart extends PartBase {
  type: 'file';
  mime: string;
  url: string;
  filename?: string;
  source?: JSONObject;
}

/** A user message that asked for a summary of the conversation; the next message is the summary. */
export interface CompactionPart extends PartBase {
  type: 'compaction';
  /** The turn went on after the summary. */
  auto: boolean;
}

export type ToolState =
  | { status: 'pending'; input: JSONObject; raw: string }
  | {
      status: 'running';
      input: JSONObject;
      title?: string;
      metadata: JSONObject;
      time: { start: number };
    }
  | {
      status: 'completed';
      input: JSONObject;
      output: string;
      title: string;
      metadata: JSONObject;
      time: { start: number; end: number };
      attachments?: unknown[];
    }
  | {
      status: 'error';
      input: JSONObject;
      error: string;
      metadata: JSONObject;
      time: { start: number; end: number };
    };

export interface ToolPart extends PartBase {
  type: 'tool';
  callID: string;
  tool: string;
  state: ToolState;
}

export interface StepStartPart extends PartBase {
  type: 'step-start';
}

export interface StepFinishPart extends PartBase {
  type: 'step-finish';
  reason: string;
  cost: number;
  tokens: TokenUsage;
}

export type Part = TextPart | ToolPart | StepStartPart | StepFinishPart | FilePart | CompactionPart;

/** A message with its parts, as `prompt` and `messages` return them. */
export interface MessageWithParts {
  info: MessageInfo;
  parts: Part[];
}

/** `GET /session/status` per session; sessions that are idle are absent. */
export type SessionStatus =
  | { type: 'idle' }
  | { type: 'busy' }
  | { type: 'awaiting-input' }
  | { type: 'retry'; attempt?: number; message?: string; next?: number };

export interface PermissionRequest {
  id: string;
  sessionID: string;
  permission: string;
  patterns: string[];
  metadata: JSONObject;
  always: string[];
  tool?: { messageID?: string; callID?: string };
}

export type PermissionReply = 'once' | 'always' | 'reject';

export interface QuestionRequest {
  id: string;
  sessionID: string;
  questions: unknown[];
  tool: { messageID: string; callID: string };
}

/** What a model takes or gives, by kind. */
export interface Modalities {
  text: boolean;
  audio: boolean;
  image: boolean;
  video: boolean;
  pdf: boolean;
}

/**
 * A model of a provider, in OpenCode's shape. `api.npm` names the wire format
 * (`@ai-sdk/openai-compatible`, `@ai-sdk/anthropic`; empty for the scripted model); prices and
 * limits the server does not know are 0.
 */
export interface ModelInfo {
  id: string;
  providerID: string;
  name: string;
  api: { id: string; url: string; npm: string };
  capabilities: {
    temperature: boolean;
    reasoning: boolean;
    attachment: boolean;
    toolcall: boolean;
    input: Modalities;
    output: Modalities;
    interleaved: boolean | { field: string };
  };
  cost: { input: number; output: number; cache: { read: number; write: number } };
  limit: { context: number; input?: number; output: number };
  status: 'alpha' | 'beta' | 'deprecated' | 'active';
  options: Record<string, unknown>;
  headers: Record<string, string>;
  release_date: string;
  variants?: Record<string, Record<string, unknown>>;
}

/** A configured provider, in OpenCode's shape; never carries its API key. */
export interface ProviderInfo {
  id: string;
  name: string;
  /** `config` (the config file), `env` (OPENAI_API_KEY, ANTHROPIC_API_KEY), `custom` (built in). */
  source: 'env' | 'config' | 'custom' | 'api';
  env: string[];
  options: { baseURL?: string; [key: string]: unknown };
  models: Record<string, ModelInfo>;
}

/** `GET /provider`: every provider, each one's default model id, the usable ones. */
export interface ProviderList {
  all: ProviderInfo[];
  default: Record<string, string>;
  connected: string[];
}

/** `GET /config`: the effective configuration (secrets read "[redacted]"). */
export interface ServerConfig {
  /** The default model, "PROVIDER/MODEL". */
  model: string;
  default_agent: string;
  [key: string]: unknown;
}

/** `GET /agent`: an agent, in OpenCode's shape. */
export interface AgentInfo {
  name: string;
  description?: string;
  mode: 'subagent' | 'primary' | 'all';
  native?: boolean;
  hidden?: boolean;
  permission: { permission: string; pattern: string; action: 'allow' | 'ask' | 'deny' }[];
  options: Record<string, unknown>;
  model?: { providerID: string; modelID: string };
  prompt?: string;
  steps?: number;
}

// ---- the /event stream ----------------------------------------------------------------------

interface ClientToolCallProperties {
  sessionID: string;
  messageID: string;
  callID: string;
  tool: string;
  clientID: string;
  requestID: string;
}

/** Maps each event type on `/event` to its `properties`. */
export interface ServerEventMap {
  /** `resumed`: set when the stream was opened with a last id (see `events`). */
  'server.connected': { resumed?: boolean };
  'server.heartbeat': Record<string, never>;
  'session.created': { sessionID: string; info: Session };
  'session.updated': { sessionID: string; info: Session };
  'session.deleted': { sessionID: string; info: Session };
  'session.status': { sessionID: string; status: SessionStatus };
  'session.idle': { sessionID: string };
  'session.error': { sessionID: string; error: NamedError };
  'message.updated': { sessionID: string; info: MessageInfo };
  /** `time`: when it was published (ms since the epoch). */
  'message.part.updated': { sessionID: string; part: Part; time: number };
  'message.part.delta': {
    sessionID: string;
    messageID: string;
    partID: string;
    field: 'text';
    delta: string;
  };
  'permission.asked': PermissionRequest;
  'permission.replied': { sessionID: string; requestID: string; reply: PermissionReply };
  'question.asked': QuestionRequest;
  'question.replied': { sessionID: string; requestID: string; answers: string[][] };
  'question.rejected': { sessionID: string; requestID: string };
  'todo.updated': { sessionID: string; todos: unknown[] };
  'file.edited': { file: string };
  'client-tool.registered': { clientID: string; toolIDs: string[] };
  'client-tool.unregistered': { clientID: string; toolIDs: string[] };
  'client-tool.request': { clientID: string; request: ClientToolRequest };
  'client-tool.executing': ClientToolCallProperties;
  'client-tool.progress': ClientToolCallProperties & { metadata: JSONObject; title?: string };
  'client-tool.completed': ClientToolCallProperties & { success: true };
  'client-tool.failed': ClientToolCallProperties & { error: string };
  'client-tool.connected': { clientID: string; transport: 'sse' | 'websocket' };
  'client-tool.disconnected': { clientID: string };
}

export type ServerEventType = keyof ServerEventMap;

/**
 * One frame of `/event`. A union over the known types, so `switch (event.type)` narrows
 * `properties`. A newer server may send types not listed here; treat unknown ones as opaque.
 */
export type ServerEvent = {
  [K in ServerEventType]: { type: K; properties: ServerEventMap[K]; id?: string };
}[ServerEventType];
