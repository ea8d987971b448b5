// The tools this page runs for the model (seed 003). Automatic ones answer at once from browser
// APIs; interactive ones wait in the chat for the person (see interactive.tsx).
import type { ClientToolSpec, JSONObject } from '@switchboard/sdk';

export const interactiveToolNames = ['confirm-action', 'request-input', 'select-option'] as const;

function abortable<T>(signal: AbortSignal, work: (resolve: (v: T) => void, reject: (e: Error) => void) => void) {
  return new Promise<T>((resolve, reject) => {
    if (signal.aborted) return reject(new Error('cancelled'));
    signal.addEventListener('abort', () => reject(new Error('cancelled')), { once: true });
    work(resolve, reject);
  });
}

// The async Clipboard API needs a secure context (https or localhost); elsewhere the old
// selection-based copy still works from a user-started turn.
async function writeClipboard(text: string): Promise<void> {
  if (navigator.clipboard?.writeText) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = document.createElement('textarea');
  area.value = text;
  area.setAttribute('readonly', '');
  area.style.position = 'fixed';
  area.style.opacity = '0';
  document.body.append(area);
  area.select();
  const copied = document.execCommand('copy');
  area.remove();
  if (!copied) throw new Error('the browser refused to copy (no clipboard access on this page)');
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export const browserTools: Record<string, ClientToolSpec> = {
  'copy-to-clipboard': {
    description: "Copies text to the clipboard of the person using the Switchboard web page.",
    parameters: {
      type: 'object',
      properties: { text: { type: 'string', description: 'The text to copy' } },
      required: ['text'],
      additionalProperties: false,
    },
    handler: async (input) => {
      const text = String(input.text ?? '');
      try {
        await writeClipboard(text);
      } catch (error) {
        throw new Error(`Could not copy to the clipboard: ${describe(error)}`);
      }
      return { title: `Copied ${text.length} characters`, output: 'The text is on the clipboard.' };
    },
  },

  'read-clipboard': {
    description: "Reads the text on the clipboard of the person using the Switchboard web page.",
    parameters: { type: 'object', properties: {}, additionalProperties: false },
    handler: async () => {
      if (!navigator.clipboard?.readText) throw new Error('This browser does not let pages read the clipboard');
      let text: string;
      try {
        text = await navigator.clipboard.readText();
      } catch (error) {
        throw new Error(`Reading the clipboard was not allowed: ${describe(error)}`);
      }
      return { title: `Read ${text.length} characters`, output: text };
    },
  },

  'get-browser-location': {
    description: "Gets the geographic position of the person's browser (asks them for permission).",
    parameters: { type: 'object', properties: {}, additionalProperties: false },
    handler: (_input, ctx) =>
      abortable<JSONObject>(ctx.signal, (resolve, reject) => {
        if (!navigator.geolocation) return reject(new Error('This browser has no geolocation'));
        navigator.geolocation.getCurrentPosition(
          (pos) => {
            const where = {
              latitude: pos.coords.latitude,
              longitude: pos.coords.longitude,
              accuracy: pos.coords.accuracy,
            };
            resolve({
              title: `${where.latitude.toFixed(4)}, ${where.longitude.toFixed(4)}`,
              output: JSON.stringify(where),
              metadata: where,
            });
          },
          (error) => reject(new Error(`Geolocation failed: ${error.message || 'permission denied'}`)),
          { timeout: 10000, maximumAge: 60000 },
        );
      }),
  },

  'get-page-info': {
    description: "Describes the person's browser page: URL, title, language, time zone, viewport, color scheme.",
    parameters: { type: 'object', properties: {}, additionalProperties: false },
    handler: () => {
      const info = {
        url: location.href,
        title: document.title,
        language: navigator.language,
        timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
        viewport: { width: window.innerWidth, height: window.innerHeight },
        colorScheme: matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light',
        online: navigator.onLine,
        userAgent: navigator.userAgent,
      };
      return { title: info.title, output: JSON.stringify(info, null, 2), metadata: info };
    },
  },

  'confirm-action': {
    description:
      'Asks the person to confirm an action before you take it. They may confirm or cancel (with a reason).',
    parameters: {
      type: 'object',
      properties: {
        action: { type: 'string', description: 'What will happen, e.g. "Delete 3 files"' },
        description: { type: 'string', description: 'Details the person should know' },
        destructive: { type: 'boolean', description: 'True when the action cannot be undone' },
      },
      required: ['action'],
    },
    handler: 'interactive',
  },

  'request-input': {
    description:
      'Asks the person to fill in a small form. `schema` is a JSON Schema object whose properties become the fields (string, number, integer, boolean, enum).',
    parameters: {
      type: 'object',
      properties: {
        prompt: { type: 'string', description: 'What you are asking for' },
        schema: { type: 'object', description: 'JSON Schema of the answer: {type: "object", properties, required}' },
      },
      required: ['prompt', 'schema'],
    },
    handler: 'interactive',
  },

  'select-option': {
    description: 'Asks the person to pick one option (or several, with multiple: true).',
    parameters: {
      type: 'object',
      properties: {
        prompt: { type: 'string' },
        options: {
          type: 'array',
          minItems: 1,
          items: {
            anyOf: [
              { type: 'string' },
              {
                type: 'object',
                properties: { label: { type: 'string' }, value: {}, description: { type: 'string' } },
                required: ['label'],
              },
            ],
          },
        },
        multiple: { type: 'boolean' },
      },
      required: ['prompt', 'options'],
    },
    handler: 'interactive',
  },
};
