/** The Notebook 7 check (notebook7/): the compat check's plain Playwright set-up; scripts/test.sh starts the server. */
module.exports = { ...require('./playwright.compat.config.js'), testDir: './notebook7' };
