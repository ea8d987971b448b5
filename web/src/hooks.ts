import { createContext } from 'preact';
import { useContext, useEffect, useState } from 'preact/hooks';
import type { AppState, Controller } from './controller';

export const ControllerContext = createContext<Controller | undefined>(undefined);

export function useController(): Controller {
  const c = useContext(ControllerContext);
  if (!c) throw new Error('useController outside <ControllerContext.Provider>');
  return c;
}

/** The controller's state, re-rendering on every change. */
export function useAppState(): AppState {
  const controller = useController();
  const [state, setState] = useState(controller.getState());
  useEffect(() => {
    setState(controller.getState());
    return controller.subscribe(() => setState(controller.getState()));
  }, [controller]);
  return state;
}
