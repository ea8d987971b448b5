// Files shown on the page: those of user messages (docs/api.md "Files in prompts") and the
// attachments of tool results (the `read` tool on an image, an MCP tool's image).
import { useRef } from 'preact/hooks';

/** A file as a message part or a tool result's attachment carries it. */
export interface FileRef {
  mime: string;
  url: string;
  filename?: string;
}

/** A file part of a user message; the SDK's Part does not list it. */
export interface FilePart extends FileRef {
  id: string;
  type: 'file';
}

const imageMimes = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);

/** Shown as an image only when both the part's mime and its base64 `data:` URL say the same image type. */
export function shownImage(part: FileRef): boolean {
  if (typeof part.mime !== 'string' || typeof part.url !== 'string') return false;
  const mime = part.mime.toLowerCase();
  if (!imageMimes.has(mime)) return false;
  const prefix = `data:${mime};base64,`;
  return part.url.slice(0, prefix.length).toLowerCase() === prefix;
}

export function fileName(part: FileRef): string {
  if (part.filename) return part.filename;
  if (!part.url.startsWith('data:')) return part.url.split('/').pop() || part.url;
  return 'file';
}

/** A thumbnail that opens the image at full size in a modal dialog (Escape or Close closes it). */
export function ImageAttachment({ part }: { part: FileRef }) {
  const dialog = useRef<HTMLDialogElement>(null);
  const name = fileName(part);
  return (
    <>
      <button type="button" class="attachment-thumb" title={`${name} (${part.mime}): open larger`}
        onClick={() => dialog.current?.showModal()}>
        <img src={part.url} alt={name} />
      </button>
      <dialog class="image-dialog" ref={dialog} aria-label={name}
        onClick={(e) => {
          // A click on the backdrop (the dialog element itself, outside its content) closes it.
          if (e.target === e.currentTarget) e.currentTarget.close();
        }}>
        <figure>
          <img src={part.url} alt={name} />
          <figcaption>
            {name} <span class="attachment-mime">{part.mime}</span>
          </figcaption>
        </figure>
        <form method="dialog" class="actions">
          <button type="submit" class="secondary">
            Close
          </button>
        </form>
      </dialog>
    </>
  );
}

