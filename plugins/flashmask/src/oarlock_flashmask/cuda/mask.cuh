// mask.cuh: FlashMask's mask on the GPU, exactly as oarlock_flashmask.kernel defines it for the CPU.
//
// startend_row_indices (sri) is int32 [B, Hm, Sk, C] (contiguous), Hm in {1, Hk, Hq}; C in {1, 2, 4}. Key
// (column) j holds C query-row indices; Sq means "nothing":
//   causal, C=1 (LTS):                rows >= LTS masked                   (+ the causal triangle)
//   causal, C=2 (LTS, LTE):           rows in [LTS, LTE) masked            (+ causal)
//   non-causal, C=2 (LTS, UTE):       rows >= LTS masked, rows < UTE masked
//   non-causal, C=4 (LTS, LTE, UTS, UTE): rows in [LTS, LTE) or [UTS, UTE) masked
// Causal and windows align the bottom-right corner: off = Sk - Sq; key j is hidden from query i when
// j > i + off (causal); a window (wl, wr) shows query i the keys [i + off - wl, i + off + wr] (a negative
// side means unbounded; windows come without sri). Query head h reads mask head h / (Hq / Hm).
//
// Tiles: a pre-pass (fm_block_stats in fwd.cu) stores, for every (b, mask head, key block of BLOCK_N
// columns, vector c), the min and the max of that vector over the block's columns, layout
// [B, Hm, nkb, C] (int32, two arrays). fm_classify uses them to call a (query block, key block) tile
// SKIP (every element masked: no loads, no math), FULL (none masked: no mask work) or PARTIAL (apply
// fm_masked element by element). Both must agree with the CPU kernel's _Mask.

#define FM_STATS_BLOCK 64   // key columns per pre-pass block (the kernels' key tiles are this wide too)
#define FM_SKIP 0
#define FM_FULL 1
#define FM_PARTIAL 2

struct FlashMaskSpec {
    const int* sri;      // nullptr when there is no startend_row_indices
    const int* bmin;     // [B, Hm, nkb, C] block minima (nullptr without sri)
    const int* bmax;     // [B, Hm, nkb, C] block maxima
    int hm;              // mask heads
    int c;               // vectors per key (1, 2 or 4)
    int head_div;        // Hq / Hm: query head h uses mask head h / head_div
    int causal;          // 0 or 1
    int wl, wr;          // window sides, -1 = unbounded (both -1: no window)
    int sq, sk;          // query and key lengths
    int nkb;             // key blocks of the pre-pass
};

// The vectors of key j for (batch b, mask head m): sri + ((b * Hm + m) * Sk + j) * C
__device__ __forceinline__ const int* fm_vectors(const FlashMaskSpec& m, int b, int mh, int j) {
    return m.sri + (((long long)b * m.hm + mh) * m.sk + j) * m.c;
}

// True when query row i may not see key j (v: key j's vectors, ignored without sri).
__device__ __forceinline__ bool fm_masked(const FlashMaskSpec& m, const int* v, int i, int j) {
    const int off = m.sk - m.sq;
    if (m.causal && j > i + off) return true;
    if (m.wl >= 0 && j < i + off - m.wl) return true;
    if (m.wr >= 0 && j > i + off + m.wr) return true;
    if (m.sri == nullptr) return false;
    if (m.causal) {
        if (m.c == 1) return i >= v[0];
        return i >= v[0] && i < v[1];
    }
    if (m.c == 2) return i >= v[0] || i < v[1];
    return (i >= v[0] && i < v[1]) || (i >= v[2] && i < v[3]);
}

// Classify the tile rows [r0, r1) x columns [c0, c1) of key block kb for (b, mask head mh). Non-empty tiles.
__device__ __forceinline__ int fm_classify(const FlashMaskSpec& m, int b, int mh, int kb, int r0, int r1, int c0,
                                           int c1) {
    const int off = m.sk - m.sq;
    bool full = false, clean = true;   // full: every element masked; clean: none masked
    if (m.causal) {
        full |= c0 > r1 - 1 + off;
        clean &= c1 - 1 <= r0 + off;
    }
    if (m.wl >= 0 || m.wr >= 0) {
        const long long wl = m.wl >= 0 ? m.wl : (long long)m.sk + m.sq;
        const long long wr = m.wr >= 0 ? m.wr : (long long)m.sk + m.sq;
        full |= (c1 - 1 < r0 + off - wl) || (c0 > r1 - 1 + off + wr);
        clean &= (c0 >= r1 - 1 + off - wl) && (c1 - 1 <= r0 + off + wr);
    }
    if (m.sri != nullptr) {
        const long long base = (((long long)b * m.hm + mh) * m.nkb + kb) * m.c;
        const int* lo = m.bmin + base;
        const int* hi = m.bmax + base;
        if (m.causal && m.c == 1) {              // rows >= LTS
            full |= r0 >= hi[0];
            clean &= r1 <= lo[0];
        } else if (m.causal || m.c == 4) {       // rows in [LTS, LTE) (and [UTS, UTE))
            for (int p = 0; p < m.c; p += 2) {
                full |= (r0 >= hi[p]) && (r1 <= lo[p + 1]);
                clean &= (r1 <= lo[p]) || (r0 >= hi[p + 1]) || (lo[p] >= hi[p + 1]);
            }
        } else {                                 // non-causal C=2: rows >= LTS, rows < UTE
            full |= r0 >= hi[0];
            clean &= r1 <= lo[0];
            full |= r1 <= lo[1];
            clean &= r0 >= hi[1];
        }
    }
    return full ? FM_SKIP : (clean ? FM_FULL : FM_PARTIAL);
}

// The spec of one launch from its kernel arguments (sri, bmin and bmax are dummies when has_sri is 0).
__device__ __forceinline__ FlashMaskSpec fm_spec(const int* sri, const int* bmin, const int* bmax, int has_sri, int hm,
                                                 int c, int hq, int causal, int wl, int wr, int sq, int sk) {
    FlashMaskSpec m;
    m.sri = has_sri ? sri : nullptr;
    m.bmin = has_sri ? bmin : nullptr;
    m.bmax = has_sri ? bmax : nullptr;
    m.hm = hm;
    m.c = c;
    m.head_div = hq / hm;
    m.causal = causal;
    m.wl = wl;
    m.wr = wr;
    m.sq = sq;
    m.sk = sk;
    m.nkb = (sk + FM_STATS_BLOCK - 1) / FM_STATS_BLOCK;
    return m;
}
