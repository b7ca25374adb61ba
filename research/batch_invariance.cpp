// batch_invariance.cpp: dump every graph tensor of a llama.cpp decode, batch of k vs narrower
// (default: one token at a time), and write them to a binary file for batch_invariance.py.
//
// Built and run by research/batch_invariance.py (see its docstring). Usage:
//   batch_invariance MODEL OUT.bin [-k K] [-p PROMPT_TOKENS] [-c CHUNK] [-t THREADS]
//                    [--no-repack] [--fa on|off|auto] [--no-trace]
//
// Steps: decode a prompt of P tokens, then
//   (a) decode the next k tokens in ONE batch (logits for all k), recording every graph node;
//   (b) remove those cells (llama_memory_seq_rm) and decode the same k tokens in chunks of
//       CHUNK (default 1), recording every graph node of every chunk;
//   (c) the same two steps again on a second context without the eval callback (so the graph runs
//       as in production, with op fusion), recording only the logits.
// Output file: a sequence of records
//   u32 run (0 = batch, 1 = chunked), u32 chunk_index, u32 node_index, u32 op_len, op bytes,
//   u32 name_len, name bytes, i64 ne[4], i32 src[4], u64 n, float data[n]   (data in logical ne0-fastest order)
// with pseudo-tensors "logits" (node_index 0xFFFFFFFF) for llama_get_logits_ith of each position,
// and run 2/3 for the no-callback logits.

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "llama.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

struct recorder {
    FILE *   out       = nullptr;
    uint32_t run       = 0;
    uint32_t chunk     = 0;
    uint32_t node      = 0;
    bool     enabled   = false;
    std::unordered_map<const ggml_tensor *, int32_t> ids;  // node -> index in this graph
};

static void write_u32(FILE * f, uint32_t v) { fwrite(&v, 4, 1, f); }

static void write_record(recorder & r, uint32_t node, const std::string & op, const std::string & name,
                         const int64_t ne[4], const std::vector<float> & data, const int32_t src[4]) {
    write_u32(r.out, r.run);
    write_u32(r.out, r.chunk);
    write_u32(r.out, node);
    write_u32(r.out, (uint32_t) op.size());
    fwrite(op.data(), 1, op.size(), r.out);
    write_u32(r.out, (uint32_t) name.size());
    fwrite(name.data(), 1, name.size(), r.out);
    fwrite(ne, 8, 4, r.out);
    fwrite(src, 4, 4, r.out);
    uint64_t n = data.size();
    fwrite(&n, 8, 1, r.out);
    fwrite(data.data(), 4, data.size(), r.out);
}

static bool gather(const ggml_tensor * t, std::vector<float> & data) {
    if (t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16 && t->type != GGML_TYPE_BF16 &&
        t->type != GGML_TYPE_I32) {
        return false;
    }
    if (t->data == nullptr || (t->buffer && !ggml_backend_buffer_is_host(t->buffer))) {
        return false;
    }
    const int64_t n = ggml_nelements(t);
    data.resize(n);
    int64_t idx = 0;
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++) {
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++) {
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++) {
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++) {
                    const char * p = (const char *) t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] +
                                     i3 * t->nb[3];
                    float v = 0.0f;
                    switch (t->type) {
                        case GGML_TYPE_F32:  v = *(const float *) p; break;
                        case GGML_TYPE_F16:  v = ggml_fp16_to_fp32(*(const ggml_fp16_t *) p); break;
                        case GGML_TYPE_BF16: v = ggml_bf16_to_fp32(*(const ggml_bf16_t *) p); break;
                        case GGML_TYPE_I32:  v = (float) *(const int32_t *) p; break;
                        default: break;
                    }
                    data[idx++] = v;
                }
            }
        }
    }
    return true;
}

static bool eval_cb(ggml_tensor * t, bool ask, void * user_data) {
    recorder * r = (recorder *) user_data;
    if (ask) {
        return true;  // we want every node
    }
    if (!r->enabled) {
        return true;
    }
    std::vector<float> data;
    const uint32_t node = r->node++;
    if (!gather(t, data)) {
        data.clear();
    }
    if (node == 0) {
        r->ids.clear();
    }
    r->ids[t] = (int32_t) node;
    int32_t src[4] = { -1, -1, -1, -1 };  // graph nodes this one reads (-1: a leaf such as a weight)
    for (int s = 0; s < 4 && s < GGML_MAX_SRC; s++) {
        auto it = t->src[s] ? r->ids.find(t->src[s]) : r->ids.end();
        if (it != r->ids.end()) {
            src[s] = it->second;
        } else if (t->src[s] && t->src[s]->view_src) {
            auto iv = r->ids.find(t->src[s]->view_src);
            src[s]  = iv != r->ids.end() ? iv->second : -2;  // -2: a view of a leaf (the KV cache)
        }
    }
    write_record(*r, node, ggml_op_desc(t), t->name, t->ne, data, src);
    return true;
}

static void record_logits(recorder & r, llama_context * ctx, int n_out, int n_vocab) {
    for (int i = 0; i < n_out; i++) {
        const float *      lg = llama_get_logits_ith(ctx, i);
        std::vector<float> data(lg, lg + n_vocab);
        int64_t            ne[4] = { n_vocab, 1, 1, 1 };
        int32_t            src[4] = { -1, -1, -1, -1 };
        write_record(r, 0xFFFFFFFFu - (uint32_t) (n_out - 1 - i), "LOGITS", "logits", ne, data, src);
    }
}

static int decode(llama_context * ctx, const std::vector<llama_token> & toks, int pos0, bool all_logits) {
    llama_batch b = llama_batch_init((int32_t) toks.size(), 0, 1);
    for (size_t i = 0; i < toks.size(); i++) {
        b.token[i]     = toks[i];
        b.pos[i]       = pos0 + (int) i;
        b.n_seq_id[i]  = 1;
        b.seq_id[i][0] = 0;
        b.logits[i]    = all_logits || i + 1 == toks.size();
    }
    b.n_tokens = (int32_t) toks.size();
    int rc     = llama_decode(ctx, b);
    llama_batch_free(b);
    return rc;
}

static void log_quiet(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN) {
        fputs(text, stderr);
    }
}

int main(int argc, char ** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL OUT.bin [-k K] [-p P] [-c CHUNK] [-t THREADS] [--no-repack] "
                        "[--fa on|off|auto] [--no-trace]\n", argv[0]);
        return 2;
    }
    const char * model_path = argv[1];
    const char * out_path   = argv[2];
    int          k = 13, P = 32, chunk = 1, threads = 2;
    bool         repack = true, trace = true;
    int          fa = -1;  // auto
    for (int i = 3; i < argc; i++) {
        std::string a = argv[i];
        if (a == "-k") { k = atoi(argv[++i]); }
        else if (a == "-p") { P = atoi(argv[++i]); }
        else if (a == "-c") { chunk = atoi(argv[++i]); }
        else if (a == "-t") { threads = atoi(argv[++i]); }
        else if (a == "--no-repack") { repack = false; }
        else if (a == "--no-trace") { trace = false; }
        else if (a == "--fa") {
            std::string v = argv[++i];
            fa = v == "on" ? 1 : v == "off" ? 0 : -1;
        } else {
            fprintf(stderr, "unknown argument %s\n", a.c_str());
            return 2;
        }
    }

    llama_log_set(log_quiet, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.use_extra_bufts    = repack;
    llama_model * model   = llama_model_load_from_file(model_path, mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", model_path);
        return 1;
    }
    const llama_vocab * vocab   = llama_model_get_vocab(model);
    const int           n_vocab = llama_vocab_n_tokens(vocab);

    const char * text =
        "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"
        "    a, b = 0, 1\n    for _ in range(n - 1):\n        a, b = b, a + b\n    return b\n\n"
        "def factorial(n):\n    result = 1\n    for i in range(2, n + 1):\n        result *= i\n    return result\n"
        "\nclass Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
        "        self.items.append(item)\n";
    std::vector<llama_token> toks(1024);
    int nt = llama_tokenize(vocab, text, (int32_t) strlen(text), toks.data(), (int32_t) toks.size(), true, false);
    if (nt < P + k) {
        fprintf(stderr, "text too short: %d tokens < P+k=%d\n", nt, P + k);
        return 1;
    }
    toks.resize(nt);
    std::vector<llama_token> prompt(toks.begin(), toks.begin() + P);
    std::vector<llama_token> cont(toks.begin() + P, toks.begin() + P + k);

    recorder rec;
    rec.out = fopen(out_path, "wb");
    if (!rec.out) {
        fprintf(stderr, "cannot write %s\n", out_path);
        return 1;
    }

    for (int pass = 0; pass < 2; pass++) {
        const bool with_cb = pass == 0;
        if (with_cb && !trace) {
            continue;
        }
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx                = 256;  // n_kv is padded to 256: the same KV view length in every decode
        cp.n_batch              = 64;
        cp.n_ubatch             = 64;
        cp.n_threads            = threads;
        cp.n_threads_batch      = threads;
        cp.flash_attn_type      = fa == 1 ? LLAMA_FLASH_ATTN_TYPE_ENABLED :
                                  fa == 0 ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
        cp.no_perf              = true;
        if (with_cb) {
            cp.cb_eval           = eval_cb;
            cp.cb_eval_user_data = &rec;
        }
        llama_context * ctx = llama_init_from_model(model, cp);
        if (!ctx) {
            fprintf(stderr, "cannot create context\n");
            return 1;
        }
        rec.enabled = false;
        if (decode(ctx, prompt, 0, false) != 0) {
            fprintf(stderr, "prompt decode failed\n");
            return 1;
        }
        llama_memory_t mem = llama_get_memory(ctx);

        // (a) one batch of k
        rec.run     = with_cb ? 0 : 2;
        rec.chunk   = 0;
        rec.node    = 0;
        rec.enabled = with_cb;
        if (decode(ctx, cont, P, true) != 0) {
            fprintf(stderr, "batch decode failed\n");
            return 1;
        }
        rec.enabled = false;
        record_logits(rec, ctx, k, n_vocab);

        // (b) the same tokens in chunks
        llama_memory_seq_rm(mem, 0, P, -1);
        int ci = 0;
        for (int s = 0; s < k; s += chunk, ci++) {
            const int                e = std::min(k, s + chunk);
            std::vector<llama_token> part(cont.begin() + s, cont.begin() + e);
            rec.run     = with_cb ? 1 : 3;
            rec.chunk   = (uint32_t) ci;
            rec.node    = 0;
            rec.enabled = with_cb;
            if (decode(ctx, part, P + s, true) != 0) {
                fprintf(stderr, "chunk decode failed\n");
                return 1;
            }
            rec.enabled = false;
            record_logits(rec, ctx, e - s, n_vocab);
        }
        llama_free(ctx);
    }
    fclose(rec.out);

    char desc[256];
    llama_model_desc(model, desc, sizeof(desc));
    printf("model: %s\nsystem: %s\nP=%d k=%d chunk=%d threads=%d repack=%d fa=%d\n", desc, llama_print_system_info(), P, k,
           chunk, threads, (int) repack, fa);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
