/**
 * The output-area watch's front end, an anywidget ES module (built into gpumem_kernel/watchwidget/static/watch.js by
 * `jlpm build:watch`): anywidget serves it from the kernel's package, so it needs no labextension of ours.
 *
 * One state per widget model, shared by its views (an output shown twice); the model's custom messages are the
 * kernel's `history`, `sample` and `watch_event` messages. A view asks for the history when it appears (the
 * kernel answers between cells; samples flow from the sampler thread meanwhile), and says `detach` when the last
 * view of its model goes (its output was cleared or closed), so the kernel stops feeding it.
 */
import { WatchState } from './state';
import { renderWatch, type WatchRequest } from './view';

/** The part of anywidget's model (AFM) this module uses. */
export interface IWatchModel {
  get(name: 'compact'): boolean;
  get(name: 'started'): number;
  on(event: string, callback: (...args: unknown[]) => void): void;
  off(event: string, callback: (...args: unknown[]) => void): void;
  send(content: { request: WatchRequest | 'detach' }): void;
}

interface IShared {
  readonly state: WatchState;
  readonly redraws: Set<() => void>;
}

const shared = new WeakMap<IWatchModel, IShared>();

function sharedOf(model: IWatchModel): IShared {
  let entry = shared.get(model);
  if (entry === undefined) {
    const created: IShared = { state: new WatchState(model.get('started')), redraws: new Set() };
    model.on('msg:custom', (content: unknown) => {
      created.state.receive(content);
      created.redraws.forEach(redraw => redraw());
    });
    shared.set(model, created);
    entry = created;
  }
  return entry;
}

/** anywidget's render: draw into `el` now and on every message; returns the clean-up anywidget calls. */
export function render({ model, el }: { model: IWatchModel; el: HTMLElement }): () => void {
  const entry = sharedOf(model);
  const root = document.createElement('div');
  el.appendChild(root);
  const send = (request: WatchRequest): void => model.send({ request });
  const redraw = (): void => renderWatch(root, entry.state, model.get('compact'), send);
  entry.redraws.add(redraw);
  model.on('change:compact', redraw);
  redraw();
  send('history');
  return () => {
    entry.redraws.delete(redraw);
    model.off('change:compact', redraw);
    if (entry.redraws.size === 0) {
      model.send({ request: 'detach' });
    }
  };
}

export default { render };
