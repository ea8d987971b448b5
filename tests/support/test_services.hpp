#pragma once
// Test support: a PostgreSQL or Redis of the caller's own, run by scripts/test-services.sh (the
// script the test command's fixtures use): for tests that stop and start it under a running
// server, and for the cluster soak (bench/cluster_soak.cpp), which runs its own.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>

#include "server_process.hpp"

namespace sb::test {

// One service, started by the constructor and stopped (its files removed) by the destructor.
class OwnService {
 public:
  explicit OwnService(std::string service) : service_(std::move(service)) { run("start"); }
  ~OwnService() {
    try {
      run("stop");
    } catch (const std::exception& e) {
      std::cerr << e.what() << "\n";
    }
  }
  OwnService(const OwnService&) = delete;
  OwnService& operator=(const OwnService&) = delete;
  // postgresql://... or redis://...
  std::string url() const {
    std::ifstream in(state_.path() / (service_ + ".url"));
    std::string url;
    std::getline(in, url);
    return url;
  }
  // start, stop, down (stopped, its data kept), up (again on the same port), restart.
  void run(const std::string& action) {
    std::string command = std::string(SWITCHBOARD_SOURCE_DIR) + "/scripts/test-services.sh " +
                          action + " " + service_ + " " + state_.path().string() + " 2>/dev/null";
    if (std::system(command.c_str()) != 0)
      throw std::runtime_error("setup: test-services.sh " + action + " " + service_ + " failed");
  }

 private:
  std::string service_;
  TempDir state_{"switchboard-service-state"};
};

}  // namespace sb::test
