/**
 * What @lumino/widgets needs from a browser that jsdom lacks (import this before any module that loads it).
 */
const g = globalThis as { DragEvent?: unknown; MouseEvent?: unknown };
if (g.DragEvent === undefined && typeof g.MouseEvent === 'function') {
  g.DragEvent = class DragEvent extends (g.MouseEvent as typeof MouseEvent) {};
}

export {};
