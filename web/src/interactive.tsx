// What a person answers while an interactive browser tool waits: a confirmation, a form built
// from a JSON Schema, a choice. Each panel submits a result to the model or cancels with a reason.
import type { InteractiveToolCall, JSONObject } from '@switchboard/sdk';
import type { ComponentChildren } from 'preact';
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';

interface PanelProps {
  call: InteractiveToolCall;
}

type Field = {
  type?: string | string[];
  title?: string;
  description?: string;
  enum?: unknown[];
  default?: unknown;
  format?: string;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  items?: Field;
};

function str(v: unknown, fallback = ''): string {
  return typeof v === 'string' ? v : fallback;
}

type Answer = { result: unknown } | { problem: string };

// A waiting call's panel can move: it shows on its own when the request arrives before the tool's
// card, then inside the card, and Preact mounts it anew there. What the person typed or chose is
// therefore kept per call here, not in component state, so the move loses nothing, and a change
// re-renders every panel of the call that is mounted (an answer that settles while the panel
// moves reaches the new one). An entry goes when the server gives up on its call, or as the
// oldest of more than kCallStates (an answered call's panel may still render once after its
// answer, so answering does not remove it).
interface CallState {
  values: Map<string, unknown>;
  listeners: Set<() => void>;
}
const callStates = new Map<string, CallState>();
const kCallStates = 64;

function callState(call: InteractiveToolCall): CallState {
  const kept = callStates.get(call.requestID);
  if (kept) return kept;
  const fresh: CallState = { values: new Map(), listeners: new Set() };
  // A call the server already gave up on gets a state of its own that nothing keeps.
  if (call.signal.aborted) return fresh;
  callStates.set(call.requestID, fresh);
  if (callStates.size > kCallStates) callStates.delete(callStates.keys().next().value!);
  call.signal.addEventListener('abort', () => callStates.delete(call.requestID), { once: true });
  return fresh;
}

function useCallState<T>(call: InteractiveToolCall, name: string, initial: () => T): [T, (value: T) => void] {
  const state = callState(call);
  if (!state.values.has(name)) state.values.set(name, initial());
  const [, rerender] = useState(0);
  // Listening from the render's commit on (a layout effect runs in the same task), not from after
  // the next paint: a panel mounted anew (moved into its card) that the person types into before
  // then would not re-render, and its handlers would answer with what it showed before (a cancel
  // without the reason typed; seen in web_e2e on a loaded machine).
  useLayoutEffect(() => {
    const listener = () => rerender((n) => n + 1);
    state.listeners.add(listener);
    return () => {
      state.listeners.delete(listener);
    };
  }, [state]);
  return [
    state.values.get(name) as T,
    (value: T) => {
      state.values.set(name, value);
      for (const listener of state.listeners) listener();
    },
  ];
}

/**
 * The frame every interactive panel shares: a non-modal dialog with a heading, the panel's own
 * fields, a reason field for cancelling, Cancel / submit buttons (disabled while the answer is on
 * its way) and Escape to cancel. `answer` turns the fields into the result, or a problem to show.
 */
function Panel({
  call,
  heading,
  description,
  submitLabel,
  danger,
  focusSubmit,
  answer,
  children,
}: {
  call: InteractiveToolCall;
  heading: string;
  description?: string;
  submitLabel: string;
  danger?: boolean;
  focusSubmit?: boolean;
  answer: () => Answer;
  children?: ComponentChildren;
}) {
  const [busy, setBusy] = useCallState(call, 'busy', () => false);
  const [problem, setProblem] = useCallState<string | undefined>(call, 'problem', () => undefined);
  const [reason, setReason] = useCallState(call, 'reason', () => '');
  const form = useRef<HTMLFormElement>(null);
  const submitButton = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    const first = focusSubmit ? submitButton.current : form.current?.querySelector<HTMLElement>('input, select, textarea');
    first?.focus();
  }, []);
  const id = `${call.toolName}-${call.toolCallId}`;
  const run = async (send: () => Promise<boolean>) => {
    setBusy(true);
    setProblem(undefined);
    if (!(await send())) {
      setProblem('The answer was not accepted: the call has already ended.');
      setBusy(false);
    }
  };
  const cancel = () => {
    // Read where the input's handler wrote it, not from this render: a click that comes before
    // the re-render (a loaded machine) would cancel without the reason just typed.
    const why = String(callState(call).values.get('reason') ?? '').trim();
    void run(() => call.cancel(why ? `The user cancelled: ${why}` : 'The user cancelled this tool call'));
  };
  return (
    <form
      ref={form}
      class="interactive"
      role="dialog"
      aria-labelledby={`${id}-title`}
      aria-describedby={description ? `${id}-desc` : undefined}
      onSubmit={(e) => {
        e.preventDefault();
        const a = answer();
        if ('problem' in a) return setProblem(a.problem);
        void run(() => call.submit(a.result));
      }}
      onKeyDown={(e) => {
        if (e.key === 'Escape' && !busy) cancel();
      }}
    >
      <h3 id={`${id}-title`}>{heading}</h3>
      {description && <p id={`${id}-desc`}>{description}</p>}
      {children}
      {problem && (
        <p class="inline-error" role="alert">
          {problem}
        </p>
      )}
      <div class="field reason">
        <label for={`${id}-reason`}>Reason if you cancel (optional, sent to the model)</label>
        <input id={`${id}-reason`} type="text" value={reason} onInput={(e) => setReason(e.currentTarget.value)} />
      </div>
      <div class="actions">
        <button type="button" class="secondary" disabled={busy} onClick={cancel}>
          Cancel
        </button>
        <button type="submit" class={danger ? 'danger' : 'primary'} disabled={busy} ref={submitButton}>
          {submitLabel}
        </button>
      </div>
    </form>
  );
}

function ConfirmAction({ call }: PanelProps) {
  const action = str(call.args.action, 'Continue?');
  return (
    <Panel call={call} heading={`Confirm: ${action}`} description={str(call.args.description) || undefined}
      submitLabel="Confirm" danger={call.args.destructive === true} focusSubmit
      answer={() => ({
        result: { title: 'Confirmed', output: `The user confirmed: ${action}`, metadata: { confirmed: true } },
      })} />
  );
}

function fieldType(f: Field): string {
  const t = Array.isArray(f.type) ? f.type.find((x) => x !== 'null') : f.type;
  if (f.enum) return 'enum';
  return t ?? 'string';
}

function initialValue(f: Field): string | boolean | string[] {
  const type = fieldType(f);
  if (type === 'boolean') return f.default === true;
  if (type === 'array') return Array.isArray(f.default) ? f.default.map(String) : [];
  if (f.default === undefined) return type === 'enum' && f.enum?.length ? String(f.enum[0]) : '';
  return typeof f.default === 'object' ? JSON.stringify(f.default) : String(f.default);
}

// Turns the form's strings back into the JSON types the schema asks for.
function convert(f: Field, raw: string | boolean | string[]): { value?: unknown; error?: string } {
  const type = fieldType(f);
  if (type === 'boolean') return { value: raw === true };
  if (type === 'array') {
    const list = raw as string[];
    return { value: f.items?.enum ? f.items.enum.filter((e) => list.includes(String(e))) : list };
  }
  const text = raw as string;
  if (text === '') return {};
  if (type === 'enum') return { value: f.enum?.find((e) => String(e) === text) ?? text };
  if (type === 'number' || type === 'integer') return { value: Number(text) };
  if (type === 'object') {
    try {
      return { value: JSON.parse(text) };
    } catch {
      return { error: 'must be JSON' };
    }
  }
  return { value: text };
}

function SchemaField({
  id,
  name,
  field,
  required,
  value,
  onChange,
}: {
  id: string;
  name: string;
  field: Field;
  required: boolean;
  value: string | boolean | string[];
  onChange: (v: string | boolean | string[]) => void;
}) {
  const label = field.title ?? name;
  const type = fieldType(field);
  const hint = field.description ? <p class="hint" id={`${id}-hint`}>{field.description}</p> : null;
  const described = field.description ? `${id}-hint` : undefined;
  if (type === 'boolean')
    return (
      <div class="field check">
        <input id={id} type="checkbox" checked={value === true} aria-describedby={described}
          onChange={(e) => onChange(e.currentTarget.checked)} />
        <label for={id}>{label}</label>
        {hint}
      </div>
    );
  if (type === 'array' && field.items?.enum) {
    const chosen = value as string[];
    return (
      <fieldset class="field">
        <legend>{label}</legend>
        {hint}
        {field.items.enum.map((option, i) => (
          <div class="check" key={String(option)}>
            <input id={`${id}-${i}`} type="checkbox" checked={chosen.includes(String(option))}
              onChange={(e) =>
                onChange(e.currentTarget.checked ? [...chosen, String(option)] : chosen.filter((c) => c !== String(option)))
              } />
            <label for={`${id}-${i}`}>{String(option)}</label>
          </div>
        ))}
      </fieldset>
    );
  }
  const common = {
    id,
    name,
    required,
    'aria-describedby': described,
    value: value as string,
    onInput: (e: Event) => onChange((e.currentTarget as HTMLInputElement).value),
  };
  let control;
  if (type === 'enum') {
    control = (
      <select {...common} onChange={common.onInput}>
        {!required && <option value="">—</option>}
        {field.enum!.map((e) => (
          <option key={String(e)} value={String(e)}>
            {String(e)}
          </option>
        ))}
      </select>
    );
  } else if (type === 'number' || type === 'integer') {
    control = <input {...common} type="number" step={type === 'integer' ? 1 : 'any'} min={field.minimum} max={field.maximum} />;
  } else if (type === 'object' || type === 'array' || (field.maxLength ?? 0) > 200 || field.format === 'multiline') {
    control = <textarea {...common} rows={3} placeholder={type === 'object' || type === 'array' ? 'JSON' : undefined} />;
  } else {
    const inputType =
      { email: 'email', uri: 'url', date: 'date', time: 'time', 'date-time': 'datetime-local' }[field.format ?? ''] ?? 'text';
    control = (
      <input {...common} type={inputType} minLength={field.minLength} maxLength={field.maxLength}
        pattern={field.pattern} />
    );
  }
  return (
    <div class="field">
      <label for={id}>
        {label}
        {required && <span aria-hidden="true"> *</span>}
      </label>
      {control}
      {hint}
    </div>
  );
}

function RequestInput({ call }: PanelProps) {
  const schema = (typeof call.args.schema === 'object' && call.args.schema ? call.args.schema : {}) as {
    properties?: Record<string, Field>;
    required?: string[];
  };
  const properties: Record<string, Field> =
    schema.properties && Object.keys(schema.properties).length ? schema.properties : { answer: { type: 'string', title: 'Answer' } };
  const required = new Set(schema.properties ? (schema.required ?? []) : ['answer']);
  const [values, setValues] = useCallState(call, 'values', () =>
    Object.fromEntries(Object.entries(properties).map(([k, f]) => [k, initialValue(f)])),
  );
  const id = `input-${call.toolCallId}`;
  return (
    <Panel call={call} heading={str(call.args.prompt, 'The model asks for input')} submitLabel="Submit"
      answer={() => {
        const answer: JSONObject = {};
        for (const [name, f] of Object.entries(properties)) {
          const { value, error } = convert(f, values[name]!);
          if (error) return { problem: `${f.title ?? name} ${error}` };
          if (value !== undefined) answer[name] = value;
        }
        return { result: { title: 'Answered', output: JSON.stringify(answer), metadata: answer } };
      }}>
      {Object.entries(properties).map(([name, f]) => (
        <SchemaField key={name} id={`${id}-${name}`} name={name} field={f} required={required.has(name)}
          value={values[name]!} onChange={(v) => setValues({ ...values, [name]: v })} />
      ))}
    </Panel>
  );
}

interface Option {
  label: string;
  value: unknown;
  description?: string;
}

function SelectOption({ call }: PanelProps) {
  const options: Option[] = (Array.isArray(call.args.options) ? call.args.options : []).map((o) =>
    typeof o === 'object' && o !== null
      ? {
          label: str((o as JSONObject).label, JSON.stringify(o)),
          value: (o as JSONObject).value ?? (o as JSONObject).label,
          description: str((o as JSONObject).description) || undefined,
        }
      : { label: String(o), value: o },
  );
  const multiple = call.args.multiple === true;
  const [chosen, setChosen] = useCallState<number[]>(call, 'chosen', () => []);
  const id = `select-${call.toolCallId}`;
  return (
    <Panel call={call} heading={str(call.args.prompt, 'Choose')} submitLabel="Choose"
      answer={() => {
        if (!chosen.length) return { problem: 'Choose an option first.' };
        const picked = chosen.map((i) => options[i]!);
        return {
          result: {
            title: picked.map((p) => p.label).join(', '),
            output: JSON.stringify({ selected: multiple ? picked.map((p) => p.value) : picked[0]!.value }),
          },
        };
      }}>
      <fieldset>
        <legend class="visually-hidden">Options</legend>
        {options.map((o, i) => (
          <div class="check option" key={i}>
            <input id={`${id}-${i}`} name={id} type={multiple ? 'checkbox' : 'radio'} checked={chosen.includes(i)}
              onChange={(e) =>
                setChosen(
                  multiple ? (e.currentTarget.checked ? [...chosen, i] : chosen.filter((c) => c !== i)) : [i],
                )
              } />
            <label for={`${id}-${i}`}>
              {o.label}
              {o.description && <span class="hint"> — {o.description}</span>}
            </label>
          </div>
        ))}
      </fieldset>
    </Panel>
  );
}

/** The panel for one waiting call of an interactive browser tool. */
export function InteractivePanel({ call }: PanelProps) {
  switch (call.toolName) {
    case 'confirm-action':
      return <ConfirmAction call={call} />;
    case 'request-input':
      return <RequestInput call={call} />;
    case 'select-option':
      return <SelectOption call={call} />;
    default:
      return null;
  }
}
