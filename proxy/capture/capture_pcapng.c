/* pcapng output: SHB + one IDB, then EPBs carrying synthetic IPv4/TCP segments.
 * Blocks are little-endian (the SHB's byte-order magic says so); packet
 * headers are network order.  Runs on the capture writer thread only. */
#include "capture_private.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define LINKTYPE_ETHERNET 1
#define LINKTYPE_RAW 101
#define ETH_LEN 14
#define IP_LEN 20
#define TCP_LEN 20
#define SYN_OPTS_LEN 8         /* MSS, NOP, window scale */
#define WSCALE 7               /* window 65535 << 7: 8 MiB, so big frames never "fill the window" */

enum { TCP_FIN = 0x01, TCP_SYN = 0x02, TCP_RST = 0x04, TCP_PSH = 0x08, TCP_ACK = 0x10 };

static void le16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void le32(uint8_t *p, uint32_t v) { le16(p, (uint16_t)v); le16(p + 2, (uint16_t)(v >> 16)); }
static void be16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void be32(uint8_t *p, uint32_t v) { be16(p, (uint16_t)(v >> 16)); be16(p + 2, (uint16_t)v); }
static size_t pad4(size_t n) { return (n + 3) & ~(size_t)3; }

static int io_fail(cap_pcap *p, km_err *err)
{
    return km_fail(err, "pcapng capture %s: write failed: %s", p->path, strerror(errno ? errno : EIO));
}

/* One block: type, total length, body (padded to 32 bits), total length again. */
static int write_block(cap_pcap *p, uint32_t type, const uint8_t *body, size_t len, const uint8_t *tail,
                       size_t tail_len, km_err *err)
{
    static const uint8_t zeros[4] = {0};
    size_t padded = pad4(len + tail_len);
    uint8_t head[8], end[4];
    le32(head, type);
    le32(head + 4, (uint32_t)(12 + padded));
    le32(end, (uint32_t)(12 + padded));
    errno = 0;
    if (fwrite(head, 1, 8, p->f) != 8 || fwrite(body, 1, len, p->f) != len ||
        (tail_len && fwrite(tail, 1, tail_len, p->f) != tail_len) ||
        fwrite(zeros, 1, padded - len - tail_len, p->f) != padded - len - tail_len || fwrite(end, 1, 4, p->f) != 4)
        return io_fail(p, err);
    return 0;
}

/* An option: code, length, value padded to 32 bits; returns bytes used. */
static size_t put_opt(uint8_t *at, uint16_t code, const void *val, uint16_t len)
{
    le16(at, code);
    le16(at + 2, len);
    memcpy(at + 4, val, len);
    memset(at + 4 + len, 0, pad4(len) - len);
    return 4 + pad4(len);
}

static int write_headers(cap_pcap *p, km_err *err)
{
    uint8_t shb[64] = {0}, idb[64] = {0};
    le32(shb, 0x1A2B3C4D);     /* byte-order magic */
    le16(shb + 4, 1);          /* version 1.0 */
    memset(shb + 8, 0xff, 8);  /* section length: unknown */
    size_t n = 16 + put_opt(shb + 16, 4, "kmproxy", 7); /* shb_userappl */
    n += put_opt(shb + n, 0, "", 0);
    if (write_block(p, 0x0A0D0D0A, shb, n, NULL, 0, err))
        return -1;
    le16(idb, p->link == KM_CAPTURE_RAW_IPV4 ? LINKTYPE_RAW : LINKTYPE_ETHERNET);
    /* snaplen 0: no limit */
    uint8_t tsresol = 9;       /* nanoseconds */
    size_t m = 8 + put_opt(idb + 8, 2, "kmproxy", 7); /* if_name */
    m += put_opt(idb + m, 9, &tsresol, 1);
    m += put_opt(idb + m, 0, "", 0);
    return write_block(p, 1, idb, m, NULL, 0, err);
}

int km_cap__pcap_open(cap_pcap *p, const char *path, km_capture_link link, uint16_t mss, km_err *err)
{
    memset(p, 0, sizeof *p);
    p->path = path;
    p->link = link;
    p->mss = mss;
    p->pkt = malloc(ETH_LEN + IP_LEN + TCP_LEN + SYN_OPTS_LEN + mss);
    if (!p->pkt)
        return km_fail(err, "pcapng capture %s: out of memory", path);
    p->f = fopen(path, "wb");
    if (!p->f) {
        int rc = km_fail(err, "pcapng capture %s: cannot create: %s", path, strerror(errno));
        free(p->pkt);
        p->pkt = NULL;
        return rc;
    }
    return write_headers(p, err);
}

int km_cap__pcap_close(cap_pcap *p, km_err *err)
{
    errno = 0;
    int rc = fclose(p->f) ? km_fail(err, "pcapng capture %s: close failed: %s", p->path, strerror(errno)) : 0;
    p->f = NULL;
    free(p->pkt);
    p->pkt = NULL;
    return rc;
}

/* ---- synthetic TCP ------------------------------------------------------------- */

static uint32_t csum_add(uint32_t sum, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i += 2)
        sum += (uint32_t)p[i] << 8 | p[i + 1];
    if (n & 1)
        sum += (uint32_t)p[n - 1] << 8;
    return sum;
}

static uint16_t csum_fold(uint32_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

/* The bytes of one frame on the wire: size prefix, then payload. */
typedef struct stream_bytes {
    uint8_t prefix[4];
    const uint8_t *payload;
    size_t len;                /* 4 + payload length */
} stream_bytes;

static void copy_stream(uint8_t *dst, const stream_bytes *sb, size_t off, size_t n)
{
    for (; n && off < 4; n--, off++)
        *dst++ = sb->prefix[off];
    if (n)
        memcpy(dst, sb->payload + (off - 4), n);
}

typedef struct seg {
    km_capture_dir dir;
    uint8_t flags;
    const stream_bytes *data;  /* NULL: no payload */
    size_t off, len;
} seg;

static void build_ip(uint8_t *ip, km_capture_conn *c, km_capture_dir dir, size_t total)
{
    km_capture_endpoint src = dir == KM_CAPTURE_C2S ? c->client : c->server;
    km_capture_endpoint dst = dir == KM_CAPTURE_C2S ? c->server : c->client;
    memset(ip, 0, IP_LEN);
    ip[0] = 0x45;
    be16(ip + 2, (uint16_t)total);
    be16(ip + 4, c->ip_id[dir]++);
    be16(ip + 6, 0x4000);      /* don't fragment */
    ip[8] = 64;
    ip[9] = 6;
    be32(ip + 12, src.ip);
    be32(ip + 16, dst.ip);
    be16(ip + 10, csum_fold(csum_add(0, ip, IP_LEN)));
}

/* TCP header + payload at tcp; returns the TCP length. */
static size_t build_tcp(uint8_t *tcp, cap_pcap *p, km_capture_conn *c, const seg *s)
{
    km_capture_dir d = s->dir, o = d == KM_CAPTURE_C2S ? KM_CAPTURE_S2C : KM_CAPTURE_C2S;
    size_t hlen = TCP_LEN + ((s->flags & TCP_SYN) ? SYN_OPTS_LEN : 0);
    memset(tcp, 0, hlen);
    be16(tcp, d == KM_CAPTURE_C2S ? c->client.port : c->server.port);
    be16(tcp + 2, d == KM_CAPTURE_C2S ? c->server.port : c->client.port);
    be32(tcp + 4, c->next_seq[d]);
    be32(tcp + 8, (s->flags & TCP_ACK) ? c->next_seq[o] : 0);
    tcp[12] = (uint8_t)((hlen / 4) << 4);
    tcp[13] = s->flags;
    be16(tcp + 14, 65535);
    if (s->flags & TCP_SYN) {
        uint8_t opts[SYN_OPTS_LEN] = {2, 4, (uint8_t)(p->mss >> 8), (uint8_t)p->mss, 1, 3, 3, WSCALE};
        memcpy(tcp + TCP_LEN, opts, SYN_OPTS_LEN);
    }
    if (s->data)
        copy_stream(tcp + hlen, s->data, s->off, s->len);
    return hlen + s->len;
}

static int emit(cap_pcap *p, km_capture_conn *c, const seg *s, uint64_t ts, km_err *err)
{
    size_t eth = p->link == KM_CAPTURE_ETHERNET ? ETH_LEN : 0;
    uint8_t *ip = p->pkt + eth, *tcp = ip + IP_LEN;
    size_t tcp_len = build_tcp(tcp, p, c, s);
    build_ip(ip, c, s->dir, IP_LEN + tcp_len);
    uint8_t pseudo[12];
    memcpy(pseudo, ip + 12, 8);
    pseudo[8] = 0;
    pseudo[9] = 6;
    be16(pseudo + 10, (uint16_t)tcp_len);
    be16(tcp + 16, csum_fold(csum_add(csum_add(0, pseudo, 12), tcp, tcp_len)));
    if (eth) { /* locally administered MACs derived from the IPs: 02:00:a.b.c.d */
        km_capture_endpoint src = s->dir == KM_CAPTURE_C2S ? c->client : c->server;
        km_capture_endpoint dst = s->dir == KM_CAPTURE_C2S ? c->server : c->client;
        uint8_t *e = p->pkt;
        e[0] = 2; e[1] = 0; be32(e + 2, dst.ip);
        e[6] = 2; e[7] = 0; be32(e + 8, src.ip);
        be16(e + 12, 0x0800);
    }
    size_t caplen = eth + IP_LEN + tcp_len;
    uint8_t epb[20];
    le32(epb, 0);              /* interface 0 */
    le32(epb + 4, (uint32_t)(ts >> 32));
    le32(epb + 8, (uint32_t)ts);
    le32(epb + 12, (uint32_t)caplen);
    le32(epb + 16, (uint32_t)caplen);
    if (write_block(p, 6, epb, sizeof epb, p->pkt, caplen, err))
        return -1;
    /* SYN and FIN take one sequence number each */
    c->next_seq[s->dir] += (uint32_t)s->len + ((s->flags & (TCP_SYN | TCP_FIN)) ? 1 : 0);
    return 0;
}

/* Stable per connection and incarnation, so reruns diff cleanly. */
static uint32_t isn_for(const km_capture_conn *c, unsigned dir)
{
    uint64_t z = c->id * 0x9E3779B97F4A7C15ull + c->incarnation * 0xBF58476D1CE4E5B9ull + dir + 1;
    z = (z ^ (z >> 31)) * 0x94D049BB133111EBull;
    return (uint32_t)(z ^ (z >> 29));
}

/* Each packet gets a distinct, increasing time so tools keep our order. */
static uint64_t stamp(cap_pcap *p, uint64_t ts)
{
    p->last_ts = ts > p->last_ts ? ts : p->last_ts + 1;
    return p->last_ts;
}

static int handshake(cap_pcap *p, km_capture_conn *c, uint64_t ts, km_err *err)
{
    c->next_seq[KM_CAPTURE_C2S] = c->isn[KM_CAPTURE_C2S] = isn_for(c, 0);
    c->next_seq[KM_CAPTURE_S2C] = c->isn[KM_CAPTURE_S2C] = isn_for(c, 1);
    seg syn = {KM_CAPTURE_C2S, TCP_SYN, NULL, 0, 0};
    seg synack = {KM_CAPTURE_S2C, TCP_SYN | TCP_ACK, NULL, 0, 0};
    seg ack = {KM_CAPTURE_C2S, TCP_ACK, NULL, 0, 0};
    return emit(p, c, &syn, stamp(p, ts), err) || emit(p, c, &synack, stamp(p, ts), err) ||
                   emit(p, c, &ack, stamp(p, ts), err)
               ? -1
               : 0;
}

/* Dropped frames leave a hole no dissector can cross: end the stream with a
 * RST and start a new one, so what follows decodes from its first byte. */
static int restart(cap_pcap *p, km_capture_conn *c, uint64_t ts, km_err *err)
{
    seg rst = {KM_CAPTURE_C2S, TCP_RST | TCP_ACK, NULL, 0, 0};
    if (emit(p, c, &rst, stamp(p, ts), err))
        return -1;
    c->incarnation++;
    return handshake(p, c, ts, err);
}

static int frame(cap_pcap *p, const cap_rec *r, km_err *err)
{
    km_capture_conn *c = r->conn;
    if (r->after_gap && restart(p, c, r->ts_ns, err))
        return -1;
    stream_bytes sb = {.payload = r->data, .len = 4 + r->len};
    be32(sb.prefix, (uint32_t)r->len);
    for (size_t off = 0; off < sb.len; off += p->mss) {
        size_t n = sb.len - off < p->mss ? sb.len - off : p->mss;
        bool last = off + n == sb.len;
        seg s = {r->dir, (uint8_t)(TCP_ACK | (last ? TCP_PSH : 0)), &sb, off, n};
        if (emit(p, c, &s, stamp(p, r->ts_ns), err))
            return -1;
    }
    /* The receiver acknowledges, as a real stack would; keeps tshark's analysis quiet. */
    seg ack = {r->dir == KM_CAPTURE_C2S ? KM_CAPTURE_S2C : KM_CAPTURE_C2S, TCP_ACK, NULL, 0, 0};
    return emit(p, c, &ack, stamp(p, r->ts_ns), err);
}

static int finish(cap_pcap *p, km_capture_conn *c, uint64_t ts, km_err *err)
{
    seg fin = {KM_CAPTURE_C2S, TCP_FIN | TCP_ACK, NULL, 0, 0};
    seg finack = {KM_CAPTURE_S2C, TCP_FIN | TCP_ACK, NULL, 0, 0};
    seg ack = {KM_CAPTURE_C2S, TCP_ACK, NULL, 0, 0};
    return emit(p, c, &fin, stamp(p, ts), err) || emit(p, c, &finack, stamp(p, ts), err) ||
                   emit(p, c, &ack, stamp(p, ts), err)
               ? -1
               : 0;
}

int km_cap__pcap_record(cap_pcap *p, const cap_rec *r, km_err *err)
{
    switch (r->type) {
    case REC_OPEN:
        return handshake(p, r->conn, r->ts_ns, err);
    case REC_FRAME:
        return frame(p, r, err);
    case REC_CLOSE:
        return finish(p, r->conn, r->ts_ns, err);
    }
    return 0;
}
