// `joule report`: a self-contained HTML page of figures from a profile database (--db) or a
// `joule train --json` run (--train).
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "report/html_report.hpp"

namespace joule::cli {

void add_report(CLI::App& app) {
    struct Flags {
        std::string db, train, out = "joule-report.html";
    };
    auto f = std::make_shared<Flags>();
    auto* cmd = app.add_subcommand("report", "an HTML page of figures (inline SVG, nothing fetched) from a profile database or a train run's JSON");
    auto* db = cmd->add_option("--db", f->db, "a joule profile database");
    auto* train = cmd->add_option("--train", f->train, "the output of joule train --json");
    db->excludes(train);
    cmd->add_option("--out", f->out, "the HTML file to write")->capture_default_str();
    cmd->callback([f] {
        if (f->db.empty() == f->train.empty()) throw Error("joule report takes --db FILE or --train FILE", "e.g. joule report --db joule-profile.db --out report.html");
        HtmlReport r;
        if (!f->db.empty()) {
            const profile::Store store(f->db, profile::Store::Mode::ReadOnly);
            r = profile_report(store);
        } else {
            std::ifstream in(f->train);
            if (!in) throw Error("--train " + f->train + ": cannot read the file");
            const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
            if (j.is_discarded()) throw Error("--train " + f->train + ": not JSON", "make it with joule train --json > run.json");
            r = train_report(j, f->train);
        }
        std::ofstream out(f->out);
        if (!out) throw Error("--out " + f->out + ": cannot write the report");
        write_html(out, r);
        size_t figures = 0;
        for (const HtmlSection& s : r.sections) figures += s.figures.size();
        std::cout << "wrote " << f->out << ": " << r.sections.size() << " section(s), " << figures << " figure(s) from " << r.source << "\n";
    });
}

}  // namespace joule::cli
