import { render } from 'preact';
import { App } from './app';
import { Controller } from './controller';
import { ControllerContext } from './hooks';
import './style.css';

const controller = new Controller();
render(
  <ControllerContext.Provider value={controller}>
    <App />
  </ControllerContext.Provider>,
  document.getElementById('app')!,
);
