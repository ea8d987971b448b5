export * from './errors.js';
export * from './types.js';
export { ClientToolsManager, toResponse } from './client-tools.js';
export type {
  ClientToolContext,
  ClientToolDefinition,
  ClientToolHandler,
  ClientToolsEvents,
  ClientToolsOptions,
  ConnectionState,
  InteractiveToolCall,
  PendingClientTools,
  Transport,
  WebSocketConstructor,
  WebSocketLike,
} from './client-tools.js';
export { SwitchboardClient, SessionAPI, PermissionAPI, QuestionAPI } from './client.js';
export type {
  ClientToolSpec,
  CreateSessionInput,
  PromptInput,
  SessionHandle,
  StartSessionOptions,
  SwitchboardClientOptions,
} from './client.js';
export { Chat, createChat } from './chat.js';
export type { ChatError, ChatOptions, ChatState, ChatStatus } from './chat.js';
export { readSSE, type SSEFrame } from './sse.js';
export type { FetchFunction, HttpOptions } from './http.js';
