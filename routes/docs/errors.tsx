import { Layout } from "@/components/Layout.tsx";
import { ERROR_CODES } from "@/lib/core/mod.ts";
import { renderPage } from "@/routes/render.ts";

/** GET /docs/errors: one section per error code, the target of every `doc_url`. */
export function errorsPage(): string {
  return renderPage(
    <Layout title="Errors">
      <h1>Errors</h1>
      <p>
        Every error is JSON with a top-level <code>error</code> object: <code>type</code>,{" "}
        <code>code</code>, <code>message</code>, <code>param</code>{" "}
        (when a request field is at fault) and <code>doc_url</code>{" "}
        (a link to the section below). Branch on <code>code</code>. Every response carries{" "}
        <code>Tollbooth-Request-Id</code>; quote it to support.
      </p>
      <div class="table-scroll">
        <table>
          <thead>
            <tr>
              <th scope="col">Status</th>
              <th scope="col">Code</th>
              <th scope="col">Type</th>
            </tr>
          </thead>
          <tbody>
            {Object.entries(ERROR_CODES).map(([code, e]) => (
              <tr>
                <td>{e.status}</td>
                <td>
                  <a href={`#${code}`}>
                    <code>{code}</code>
                  </a>
                </td>
                <td>
                  <code>{e.type}</code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {Object.entries(ERROR_CODES).map(([code, e]) => (
        <section id={code} class="error-doc">
          <h2>
            <code>{code}</code> · {e.status} · {e.title}
          </h2>
          <p>
            <strong>Type:</strong> <code>{e.type}</code>
          </p>
          <p>
            <strong>Cause:</strong> <Markdownish text={e.cause} />
          </p>
          <p>
            <strong>Fix:</strong> <Markdownish text={e.fix} />
          </p>
        </section>
      ))}
    </Layout>,
  );
}

/** Renders `backticked` spans of the error table as code. */
function Markdownish({ text }: { text: string }) {
  return (
    <>
      {text.split(/(`[^`]+`)/).map((part, i) =>
        part.startsWith("`") ? <code key={i}>{part.slice(1, -1)}</code> : part
      )}
    </>
  );
}
