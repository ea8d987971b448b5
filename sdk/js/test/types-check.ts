// Compiled (not run) by `npm test` against dist/*.d.ts: the public types accept what the docs
// show and reject what they should. A line marked @ts-expect-error fails the build if it compiles.
import {
  SwitchboardClient,
  SwitchboardError,
  type ChatState,
  type ClientToolContext,
  type InteractiveToolCall,
  type ServerEvent,
} from '@switchboard/sdk';

export async function usage(client: SwitchboardClient): Promise<void> {
  await client.clientTools.register(
    'get_local_time',
    { description: 'time', parameters: { type: 'object' } },
    async (input: Record<string, unknown>, ctx: ClientToolContext) => {
      ctx.signal.throwIfAborted();
      const ok: boolean = await ctx.progress({ title: 'working', metadata: { step: 1 } });
      return ok ? { title: 'Time', output: String(input.timezone) } : 'fallback';
    },
  );
  await client.clientTools.register('confirm', { description: 'ask' }, 'interactive');
  // @ts-expect-error a handler is a function or 'interactive'
  await client.clientTools.register('bad', { description: 'x' }, 'automatic');

  const chat = await client.chat({ clientTools: { ask: { description: 'd', handler: 'interactive' } } });
  const state: ChatState = chat.getState();
  const calls: readonly InteractiveToolCall[] = state.pendingClientTools.ask ?? [];
  for (const call of calls) {
    const accepted: boolean = await call.submit({ confirmed: true });
    if (!accepted) await call.cancel('User dismissed');
  }
  // @ts-expect-error the status is one of four strings
  const wrong: ChatState['status'] = 'thinking';
  void wrong;

  for await (const event of client.events()) {
    narrow(event);
  }
  try {
    await client.session.get('ses_x');
  } catch (e) {
    if (e instanceof SwitchboardError && e.code === 'NOT_FOUND') return;
  }
}

function narrow(event: ServerEvent): string {
  switch (event.type) {
    case 'message.part.delta':
      return event.properties.delta;
    case 'session.status':
      return event.properties.status.type;
    case 'client-tool.progress':
      return JSON.stringify(event.properties.metadata);
    default:
      return event.type;
  }
}
