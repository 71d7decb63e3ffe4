// Renders every tests/chat_template/templates/*.jinja with every case of conversations.json using
// Hugging Face's own renderer, @huggingface/jinja (new Template(src).render(vars)), and writes the
// outputs (or the error messages) to one JSON file for chat_template_oracle_test.cc.
//   node oracle.js NODE_MODULES SOURCE_DIR OUT_FILE
"use strict";
const fs = require("fs");
const path = require("path");
const [nodeModules, sourceDir, outFile] = process.argv.slice(2);
const jinjaDir = path.resolve(nodeModules, "@huggingface", "jinja");
const { Template } = require(jinjaDir);
const version = require(path.join(jinjaDir, "package.json")).version;

// An error thrown by the raise_exception global (its message must match ours exactly): the top
// stack frame is the function setupGlobals registers under that name.
const dist = fs.readFileSync(require.resolve(jinjaDir), "utf8").split("\n");
const raiseLine = dist.findIndex((l) => l.includes('env.set("raise_exception"')) + 1;
if (raiseLine === 0) throw new Error("raise_exception not found in @huggingface/jinja's dist");
function raised(e) {
  const m = /index\.c?js:(\d+):\d+/.exec((e.stack || "").split("\n")[1] || "");
  return m !== null && Number(m[1]) > raiseLine && Number(m[1]) <= raiseLine + 2;
}

const here = path.join(sourceDir, "tests", "chat_template");
const conversations = JSON.parse(fs.readFileSync(path.join(here, "conversations.json"), "utf8"));
const cases = conversations.cases;
const names = fs.readdirSync(path.join(here, "templates")).filter((f) => f.endsWith(".jinja")).sort();
const results = [];
for (const name of names) {
  const source = fs.readFileSync(path.join(here, "templates", name), "utf8");
  let template = null;
  let parseError = null;
  try {
    template = new Template(source);
  } catch (e) {
    parseError = String(e.message);
  }
  for (const c of cases) {
    const r = { template: name, case: c.name };
    if (parseError !== null) {
      r.ok = false;
      r.error = parseError;
      r.raised = false;
    } else {
      try {
        r.output = template.render(c.vars);
        r.ok = true;
      } catch (e) {
        r.ok = false;
        r.error = String(e && e.message);
        r.raised = raised(e);
      }
    }
    results.push(r);
  }
}
// snippets.txt: one small template a line (the edge cases of every operator, filter, test and
// error), each rendered with snippet_vars.
const snippets = fs.readFileSync(path.join(here, "snippets.txt"), "utf8").split("\n");
snippets.forEach((source, i) => {
  if (source.length === 0) return;
  const r = { template: `snippets.txt:${i + 1}`, case: "snippet_vars" };
  try {
    r.output = new Template(source).render(conversations.snippet_vars);
    r.ok = true;
  } catch (e) {
    r.ok = false;
    r.error = String(e && e.message);
    r.raised = raised(e);
  }
  results.push(r);
});
fs.writeFileSync(outFile, JSON.stringify({ version, results }, null, 1));
console.log(`oracle.js: @huggingface/jinja ${version}, ${results.length} renders of ${names.length} templates`);
