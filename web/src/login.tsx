// The password prompt of a server with server.password: POST /auth checks the password and sets
// the cookie that admits this browser (docs/security.md).
import { useState } from 'preact/hooks';

/** True when the server wants a password and this browser has not logged in. */
export async function needsLogin(): Promise<boolean> {
  try {
    const res = await fetch('/auth', { cache: 'no-store' });
    if (!res.ok) return false;
    const status = (await res.json()) as { required?: boolean; authenticated?: boolean };
    return status.required === true && status.authenticated !== true;
  } catch {
    return false;  // the app's own reconnection takes it from here
  }
}

export function Login({ onDone }: { onDone: () => void }) {
  const [error, setError] = useState<string | undefined>();
  const [busy, setBusy] = useState(false);

  async function submit(event: Event) {
    event.preventDefault();
    const form = event.currentTarget as HTMLFormElement;
    const password = (form.elements.namedItem('password') as HTMLInputElement).value;
    setBusy(true);
    setError(undefined);
    try {
      const res = await fetch('/auth', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ password }),
      });
      if (res.ok) {
        onDone();
        return;
      }
      setError(res.status === 401 ? 'Wrong password.' : `The server answered ${res.status}.`);
    } catch (e) {
      setError(`The server cannot be reached: ${e instanceof Error ? e.message : String(e)}`);
    } finally {
      setBusy(false);
    }
  }

  return (
    <form class="login" onSubmit={(e) => void submit(e)}>
      <div class="brand">Switchboard</div>
      <label>
        Password
        <input type="password" name="password" autocomplete="current-password" required autoFocus />
      </label>
      <button type="submit" class="primary" disabled={busy}>
        Log in
      </button>
      {error && (
        <p class="login-error" role="alert">
          {error}
        </p>
      )}
    </form>
  );
}
