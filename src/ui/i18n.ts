/**
 * Translation helpers shared by every view.
 *
 * All user-facing strings go through JupyterLab's `ITranslator`; views receive the loaded bundle as a `Trans`
 * so that pure modules (state messages, labels) need no runtime import of @jupyterlab/translation and stay
 * testable in plain jest.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

/** The gettext domain of this extension (the Python package's name, as JupyterLab language packs expect). */
export const TRANSLATION_DOMAIN = 'jupyterlab_gpumem';

/** The part of a translation bundle this extension uses. */
export type Trans = Pick<TranslationBundle, '__' | '_n'>;

/** Fill `%1`, `%2`, … the way JupyterLab's gettext does (without translating). */
export function substitute(text: string, args: ReadonlyArray<unknown>): string {
  return text.replace(/%(\d+)/g, (whole, index: string) => {
    const i = Number(index) - 1;
    return i < args.length ? String(args[i]) : whole;
  });
}

/**
 * A bundle that does not translate: used before the translator is known and in unit tests.
 */
export const untranslated: Trans = {
  __: (msgid: string, ...args: unknown[]) => substitute(msgid, args),
  // As JupyterLab's gettext: `n` itself is %1, the further arguments %2, %3, …
  _n: (msgid: string, plural: string, n: number, ...args: unknown[]) =>
    substitute(n === 1 ? msgid : plural, [n, ...args])
};
