/**
 * This extension's version, sent to the kernel in the `open` message (the kernel logs who connected).
 * Kept equal to package.json's version by a unit test (importing package.json would leave `src/`).
 */
export const VERSION = '0.1.0';

/** The `client` field of the `open` message. */
export const CLIENT = `jupyterlab-gpumem ${VERSION}`;
