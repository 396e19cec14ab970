// The reference for tests/hmm/test_tree.py: Kaldi's own tree-building functions (BuildTree's
// steps, src/tree/build-tree-utils.cc) on stats read from a text file, the tree written as
// Kaldi's binary EventMap. How to build and run it: tests/hmm/kaldi_reference.py. Not compiled
// by the test suite. Kaldi's GaussClusterable needs its matrix library (and BLAS); this one keeps
// the same float count, double stats and objective (src/tree/clusterable-classes.cc) in vectors.
#include <cmath>
#include <fstream>
#include "tree/build-tree-utils.h"
#include "tree/build-tree-questions.h"
#include "tree/event-map.h"
using namespace kaldi;

namespace kaldi {
BaseFloat Clusterable::ObjfPlus(const Clusterable &o) const { Clusterable *c = Copy(); c->Add(o); BaseFloat a = c->Objf(); delete c; return a; }
BaseFloat Clusterable::ObjfMinus(const Clusterable &o) const { Clusterable *c = Copy(); c->Sub(o); BaseFloat a = c->Objf(); delete c; return a; }
BaseFloat Clusterable::Distance(const Clusterable &o) const { Clusterable *c = Copy(); c->Add(o); BaseFloat a = Objf() + o.Objf() - c->Objf(); delete c; return a < 0 ? 0 : a; }
}

class Gauss : public Clusterable {
 public:
  Gauss(int d, BaseFloat f): count_(0), x_(d, 0.0), x2_(d, 0.0), floor_(f) {}
  Clusterable *Copy() const { return new Gauss(*this); }
  BaseFloat Objf() const {
    if (count_ <= 0) return 0;
    double per = 0, logs = 0;
    for (size_t d = 0; d < x_.size(); d++) {
      double m = x_[d] / count_, v = x2_[d] / count_ - m * m, fv = std::max(v, (double)floor_);
      per += -0.5 * v / fv; logs += std::log(fv);
    }
    per += -0.5 * (logs + M_LOG_2PI * x_.size());
    return per * count_;
  }
  BaseFloat Normalizer() const { return count_; }
  void SetZero() { count_ = 0; std::fill(x_.begin(), x_.end(), 0); std::fill(x2_.begin(), x2_.end(), 0); }
  void Add(const Clusterable &o) { const Gauss &g = static_cast<const Gauss&>(o); count_ += g.count_; for (size_t d = 0; d < x_.size(); d++) { x_[d] += g.x_[d]; x2_[d] += g.x2_[d]; } }
  void Sub(const Clusterable &o) { const Gauss &g = static_cast<const Gauss&>(o); count_ -= g.count_; for (size_t d = 0; d < x_.size(); d++) { x_[d] -= g.x_[d]; x2_[d] -= g.x2_[d]; } }
  std::string Type() const { return "gauss"; }
  void Write(std::ostream &, bool) const {}
  Clusterable *ReadNew(std::istream &, bool) const { return NULL; }
  BaseFloat count_; std::vector<double> x_, x2_; BaseFloat floor_;
};

int main(int argc, char **argv) {
  // input: dim E ; E lines: nkeys (key value)* count x(dim) x2(dim) ; R roots lines "n p..." ;
  // Qp phone questions ; Qc pdf-class questions ; max_leaves thresh cluster_thresh round N P
  std::ifstream in(argv[1]);
  int dim, E; in >> dim >> E;
  BuildTreeStatsType stats;
  for (int e = 0; e < E; e++) {
    int nk; in >> nk; EventType ev;
    for (int k = 0; k < nk; k++) { int key, val; in >> key >> val; ev.push_back(std::make_pair(key, val)); }
    Gauss *g = new Gauss(dim, 0.01); in >> g->count_;
    for (int d = 0; d < dim; d++) in >> g->x_[d];
    for (int d = 0; d < dim; d++) in >> g->x2_[d];
    stats.push_back(std::make_pair(ev, g));
  }
  auto read_sets = [&](std::vector<std::vector<int32> > *v) { int n; in >> n; v->resize(n); for (int i = 0; i < n; i++) { int m; in >> m; (*v)[i].resize(m); for (int j = 0; j < m; j++) in >> (*v)[i][j]; } };
  std::vector<std::vector<int32> > roots, qphones, qpdf; read_sets(&roots); read_sets(&qphones); read_sets(&qpdf);
  int max_leaves, round, N, P; float thresh, cluster_thresh; in >> max_leaves >> thresh >> cluster_thresh >> round >> N >> P;
  Questions qo;
  QuestionsForKey phone_opts(0); phone_opts.initial_questions = qphones;
  for (int n = 0; n < N; n++) qo.SetQuestionsOf(n, phone_opts);
  QuestionsForKey pdf_opts(0); pdf_opts.initial_questions = qpdf; qo.SetQuestionsOf(kPdfClass, pdf_opts);
  std::vector<bool> share(roots.size(), true); std::vector<int32> p2n(1000, 3);
  int32 num_leaves = 0;
  EventMap *stub = GetStubMap(P, roots, p2n, share, &num_leaves);
  BaseFloat impr, smallest = 1e10;
  EventMap *split = SplitDecisionTree(*stub, stats, qo, thresh, max_leaves, &num_leaves, &impr, &smallest);
  if (cluster_thresh < 0) cluster_thresh = smallest;
  EventMap *cur = split; int32 removed = 0;
  if (cluster_thresh != 0) cur = ClusterEventMapRestrictedByMap(*split, stats, cluster_thresh, *stub, &removed);
  if (round) {
    int32 required = ((num_leaves - removed) / 8) * 8, r2 = 0;
    cur = ClusterEventMapToNClustersRestrictedByMap(*cur, stats, required, *stub, &r2);
  }
  int32 out_leaves; EventMap *final_map = RenumberEventMap(*cur, &out_leaves);
  std::ofstream out(argv[2], std::ios::binary);
  final_map->Write(out, true);
  std::cerr << "impr " << impr << " leaves " << out_leaves << " smallest " << smallest << std::endl;
  return 0;
}
