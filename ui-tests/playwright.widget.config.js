/** The output-area watch check (widget/): the compat check's plain Playwright set-up; scripts/test.sh starts the server. */
module.exports = { ...require('./playwright.compat.config.js'), testDir: './widget' };
