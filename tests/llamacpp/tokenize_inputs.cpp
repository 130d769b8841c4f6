// Tokenizes inputs with llama.cpp's vocabulary code (llama_tokenize: no BOS/EOS, special tokens not parsed), the
// driver of tokenizer_reference.py. Argument: a vocabulary-only GGUF. Standard input: inputs as
// <length in bytes><newline><bytes>. Output: one line per input, its token ids separated by spaces.
#include "llama.h"

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s VOCAB.gguf < inputs\n", argv[0]);
        return 2;
    }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model_params params = llama_model_default_params();
    params.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], params);
    if (model == nullptr) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    for (size_t len; std::cin >> len;) {
        std::cin.get();
        std::string text(len, '\0');
        std::cin.read(text.data(), (std::streamsize) len);
        std::vector<llama_token> ids(text.size() + 8);
        int n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(), false, false);
        if (n < 0) {
            ids.resize(-n);
            n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(), false, false);
        }
        for (int i = 0; i < n; i++) {
            printf(i ? " %d" : "%d", ids[i]);
        }
        printf("\n");
    }
    llama_model_free(model);
    return 0;
}
