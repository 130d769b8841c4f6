// Renders every conversation of builtin_templates_reference.py with one of llama.cpp's built-in chat templates
// (llm_chat_apply_template, the code behind `llama-server --chat-template NAME`), with and without the
// generation prompt. Arguments: template names. Standard input: conversations, one per line, as
// role<TAB>content<TAB>role<TAB>content... (contents without tabs or newlines). Output, per name, conversation
// and generation-prompt flag: name<TAB>conversation<TAB>flag<TAB>prompt, the prompt's backslashes and newlines
// escaped; `-` for a name llama.cpp does not know or a conversation it refuses.
#include "llama-chat.h"
#include "llama.h"

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

static std::string escaped(const std::string & s) {
    std::string out;
    for (char c : s) {
        if (c == '\\') {
            out += "\\\\";
        } else if (c == '\n') {
            out += "\\n";
        } else {
            out += c;
        }
    }
    return out;
}

int main(int argc, char ** argv) {
    std::vector<std::vector<std::string>> conversations;
    for (std::string line; std::getline(std::cin, line);) {
        std::vector<std::string> fields;
        std::stringstream ss(line);
        for (std::string f; std::getline(ss, f, '\t');) {
            fields.push_back(f);
        }
        conversations.push_back(fields);
    }
    for (int i = 1; i < argc; i++) {
        std::string name = argv[i];
        llm_chat_template tmpl;
        try {
            tmpl = llm_chat_template_from_str(name);
        } catch (...) {
            printf("%s\t-\t-\t-\n", name.c_str());
            continue;
        }
        for (size_t c = 0; c < conversations.size(); c++) {
            std::vector<llama_chat_message> messages;
            for (size_t m = 0; m + 1 < conversations[c].size(); m += 2) {
                messages.push_back({conversations[c][m].c_str(), conversations[c][m + 1].c_str()});
            }
            std::vector<const llama_chat_message *> chat;
            for (auto & m : messages) {
                chat.push_back(&m);
            }
            for (int add = 0; add < 2; add++) {
                std::string out;
                bool ok = llm_chat_apply_template(tmpl, chat, out, add) >= 0;
                printf("%s\t%zu\t%d\t%s\n", name.c_str(), c, add, ok ? escaped(out).c_str() : "-");
            }
        }
    }
}
