// OpenCode's TUI (`opencode attach URL`) in a pseudo-terminal: tmux (a Debian package) runs it in
// a detached session on a server socket of its own; the test types with send-keys and reads the
// screen with capture-pane.
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';

import { OPENCODE, opencodeEnv, waitFor } from './harness.mjs';

export class Tui {
  // Starts `opencode attach` for `server` in a 160x45 terminal.
  constructor(server, { columns = 160, rows = 45 } = {}) {
    this.socket = `sb-tui-${randomUUID().slice(0, 8)}`;
    const env = opencodeEnv(server);
    const vars = Object.entries(env)
      .filter(([k]) => /^(HOME|XDG_|OPENCODE_|NO_COLOR|PATH$|LANG$|ASAN_)/.test(k))
      .map(([k, v]) => `${k}=${shellQuote(v)}`);
    const command = `cd ${shellQuote(server.work)} && exec env ${vars.join(' ')} TERM=xterm-256color ${shellQuote(OPENCODE)} attach ${shellQuote(server.url)}`;
    this.tmux(['new-session', '-d', '-s', 'tui', '-x', String(columns), '-y', String(rows), command]);
  }

  tmux(args) {
    return execFileSync('tmux', ['-L', this.socket, ...args], { encoding: 'utf8' });
  }

  // What the terminal shows now (empty when the TUI has exited).
  screen() {
    try {
      return this.tmux(['capture-pane', '-p', '-t', 'tui']);
    } catch {
      return '';
    }
  }

  // Types `text` literally; `keys` are tmux key names (Enter, Escape, C-c, ...).
  type(text) {
    this.tmux(['send-keys', '-t', 'tui', '-l', text]);
  }
  press(...keys) {
    this.tmux(['send-keys', '-t', 'tui', ...keys]);
  }

  // Resolves with the screen once it matches `pattern`; fails showing the last screen.
  async until(pattern, what, ms = 15000) {
    let last = '';
    await waitFor(
      () => {
        last = this.screen();
        return pattern.test(last);
      },
      what,
      ms,
      () => `the screen:\n${last}`,
    );
    return last;
  }

  close() {
    try {
      this.tmux(['kill-server']);
    } catch {
      // already gone
    }
  }
}

const shellQuote = (s) => `'${String(s).replaceAll("'", "'\\''")}'`;
