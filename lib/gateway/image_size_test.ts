import assert from "node:assert/strict";
import { imageMediaTypeOf, readImageSize } from "./image_size.ts";

const dataUrl = (type: string, bytes: number[]) =>
  `data:${type};base64,${btoa(String.fromCharCode(...bytes))}`;

const be32 = (n: number) => [(n >>> 24) & 255, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
const le16 = (n: number) => [n & 255, (n >>> 8) & 255];
const le24 = (n: number) => [n & 255, (n >>> 8) & 255, (n >>> 16) & 255];
const ascii = (s: string) => [...s].map((c) => c.charCodeAt(0));

Deno.test("PNG, GIF, JPEG and WebP sizes are read from their headers", () => {
  const png = [
    0x89,
    ...ascii("PNG\r\n\x1a\n"),
    ...be32(13),
    ...ascii("IHDR"),
    ...be32(1920),
    ...be32(1080),
    8,
    6,
    0,
    0,
    0,
  ];
  assert.deepEqual(readImageSize(dataUrl("image/png", png)), {
    width: 1920,
    height: 1080,
    mediaType: "image/png",
  });

  const gif = [...ascii("GIF89a"), ...le16(640), ...le16(480), 0, 0, 0];
  assert.deepEqual(readImageSize(dataUrl("image/gif", gif)), {
    width: 640,
    height: 480,
    mediaType: "image/gif",
  });

  // SOI, an APP0 segment to skip, then SOF0 with height 300 and width 400.
  const jpeg = [
    0xff,
    0xd8,
    0xff,
    0xe0,
    0,
    16,
    ...ascii("JFIF\0"),
    1,
    1,
    0,
    0,
    1,
    0,
    1,
    0,
    0,
    0xff,
    0xc0,
    0,
    17,
    8,
    0x01,
    0x2c,
    0x01,
    0x90,
    3,
    1,
    0x22,
    0,
    2,
    0x11,
    1,
    3,
    0x11,
    1,
  ];
  assert.deepEqual(readImageSize(dataUrl("image/jpeg", jpeg)), {
    width: 400,
    height: 300,
    mediaType: "image/jpeg",
  });

  const vp8x = [
    ...ascii("RIFF"),
    ...be32(0),
    ...ascii("WEBPVP8X"),
    10,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    ...le24(2999),
    ...le24(1999),
    0,
    0,
  ];
  assert.deepEqual(readImageSize(dataUrl("image/webp", vp8x)), {
    width: 3000,
    height: 2000,
    mediaType: "image/webp",
  });
});

Deno.test("what is not a readable image of its stated type is refused with the reason", () => {
  assert.throws(() => readImageSize("data:image/png,notbase64"), /base64 data URL/);
  assert.throws(() => readImageSize("data:image/png;base64,%%%"), /not valid base64/);
  assert.throws(
    () => readImageSize(dataUrl("image/png", ascii("hello world, not an image"))),
    /not a PNG, JPEG, GIF or WebP/,
  );
  const gif = [...ascii("GIF89a"), ...le16(1), ...le16(1), 0, 0, 0];
  assert.throws(
    () => readImageSize(dataUrl("text/plain", gif)),
    /says text\/plain but holds a image\/gif/,
  );
});

Deno.test("an image labelled another image type (a PNG as image/jpeg, as many clients send it) is read as what its bytes are", () => {
  const gif = [...ascii("GIF89a"), ...le16(3), ...le16(2), 0, 0, 0];
  assert.deepEqual(readImageSize(dataUrl("image/jpeg", gif)), {
    width: 3,
    height: 2,
    mediaType: "image/gif",
  });
});

Deno.test("a data URL's header is its media type, parameters and base64, at most 256 characters", () => {
  const png = [
    137,
    80,
    78,
    71,
    13,
    10,
    26,
    10,
    0,
    0,
    0,
    13,
    ...ascii("IHDR"),
    ...be32(3),
    ...be32(2),
  ];
  const payload = btoa(String.fromCharCode(...png));
  assert.equal(readImageSize(`data:image/png;base64,${payload}`).width, 3);
  assert.equal(readImageSize(`data:IMAGE/PNG;name=a.png;;base64,${payload}`).height, 2);
  for (
    const url of [
      `data:;base64,${payload}`,
      `data:image/png;base64;x,${payload}`,
      `image/png;base64,${payload}`,
      // 4 MB of empty parameters overflowed the pattern's stack.
      `data:image/png${";".repeat(4_000_000)}base64,${payload}`,
      `data:image/png;${"x".repeat(300)};base64,${payload}`,
    ]
  ) {
    assert.throws(() => readImageSize(url), /is not a base64 data URL/, url.slice(0, 40));
  }
});

Deno.test("a GIF is as large as its frames reach, whatever its screen says", () => {
  /** An image descriptor at (left, top), its one byte of LZW data, no local color table. */
  const frame = (left: number, top: number, width: number, height: number) => [
    0x2c,
    ...le16(left),
    ...le16(top),
    ...le16(width),
    ...le16(height),
    0,
    2,
    1,
    0x44,
    0,
  ];
  const graphicControl = [0x21, 0xf9, 4, 0, 0, 0, 0, 0];
  // A 1×1 screen with a 4-color global table, a 2048×768 frame, then one reaching x = 3010.
  const gif = [
    ...ascii("GIF89a"),
    ...le16(1),
    ...le16(1),
    0x81,
    0,
    0,
    ...Array(12).fill(0),
    ...graphicControl,
    ...frame(0, 0, 2048, 768),
    ...graphicControl,
    ...frame(3000, 10, 10, 10),
    0x3b,
  ];
  assert.deepEqual(readImageSize(dataUrl("image/gif", gif)), {
    width: 3010,
    height: 768,
    mediaType: "image/gif",
  });
});

Deno.test("an image's type is read from its signature alone, as readImageSize reads it", () => {
  for (
    const bytes of [
      [137, ...ascii("PNG"), 13, 10, 26, 10, 0, 0, 0, 13, ...ascii("IHDR"), 0, 0, 0, 2, 0, 0, 0, 3],
      [...ascii("GIF89a"), ...le16(3), ...le16(2), 0, 0, 0],
    ]
  ) {
    const url = dataUrl("image/jpeg", bytes);
    assert.equal(imageMediaTypeOf(url.slice(url.indexOf(",") + 1)), readImageSize(url).mediaType);
  }
  assert.equal(imageMediaTypeOf(btoa("not an image at all")), null);
});
