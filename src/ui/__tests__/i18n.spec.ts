/**
 * The bundle used before the translator is known and in unit tests must fill placeholders exactly as
 * JupyterLab's own bundles do, or a string that reads right in jest reads wrong in JupyterLab (it did:
 * "%1 processes, %2 RSS" showed the count twice).
 */
import { nullTranslator } from '@jupyterlab/translation/lib/base';

import { untranslated } from '../i18n';

describe('untranslated', () => {
  const trans = nullTranslator.load('jupyterlab_gpumem');

  it.each([
    ['%1 process, %2 RSS', '%1 processes, %2 RSS', 1, ['12 MiB']],
    ['%1 process, %2 RSS', '%1 processes, %2 RSS', 3, ['12 MiB']],
    ['%1 tensor', '%1 tensors', 2, []],
    ['%2 of %3 alive, %1 allocation', '%2 of %3 alive, %1 allocations', 5, ['1 GiB', 'activations']]
  ])('_n(%s) fills placeholders as JupyterLab does', (one, many, n, args) => {
    // The strings are the table's: a comparison of two bundles, not UI text.
    // eslint-disable-next-line jupyter/no-dynamic-translation
    expect(untranslated._n(one, many, n, ...args)).toBe(trans._n(one, many, n, ...args));
  });

  it('puts the count first and the further arguments after it', () => {
    expect(untranslated._n('%1 process, %2 RSS', '%1 processes, %2 RSS', 3, '12 MiB')).toBe(
      '3 processes, 12 MiB RSS'
    );
  });

  it('__ fills placeholders as JupyterLab does', () => {
    expect(untranslated.__('%1 of %2', 'a', 'b')).toBe(trans.__('%1 of %2', 'a', 'b'));
  });
});
