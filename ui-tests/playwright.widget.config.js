/**
 * The output-area watch check (widget/): the compat check's plain Playwright set-up; scripts/test.sh starts the server.
 * Its two tests (JupyterLab, Notebook 7) open their own notebooks and kernels on that server, side by side: each
 * mostly waits on its busy cell, and one after the other they were the longest of the front-end checks.
 */
module.exports = {
  ...require('./playwright.compat.config.js'),
  testDir: './widget',
  fullyParallel: true,
  workers: 2
};
