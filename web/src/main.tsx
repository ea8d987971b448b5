import { render } from 'preact';
import { App } from './app';
import { Controller } from './controller';
import { ControllerContext } from './hooks';
import './style.css';

import { Login, needsLogin } from './login';

const root = document.getElementById('app')!;

function startApp(): void {
  const controller = new Controller();
  render(
    <ControllerContext.Provider value={controller}>
      <App />
    </ControllerContext.Provider>,
    root,
  );
}

// A server with a password (server.password) serves this page to anyone but its API only to
// those who log in: the login sets a cookie that fetch, the event stream and the WebSocket send.
void needsLogin().then((login) => {
  if (login) render(<Login onDone={startApp} />, root);
  else startApp();
});
