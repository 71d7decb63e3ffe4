// gRPC mixserve.v1.TextGeneration (proto/mixserve/v1/generation.proto) over the shared API layer,
// on gRPC's callback API: a waiting stream holds no thread. (The synchronous API parks one
// thread per stream polling for cancellation; under overload hundreds of them contended on
// gRPC's locks and throughput fell tenfold.)
#pragma once

#include <grpcpp/grpcpp.h>

#include "mixserve/v1/generation.grpc.pb.h"
#include "server/api.h"
#include "server/auth.h"

namespace mixserve {

class TextGenerationService final : public v1::TextGeneration::CallbackService {
 public:
  TextGenerationService(ModelHub& hub, const ApiKeys& keys) : hub_(hub), keys_(keys) {}
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* ctx,
                                                           const v1::GenerateRequest* req) override;
  grpc::ServerWriteReactor<v1::GenerateResponse>* Chat(grpc::CallbackServerContext* ctx,
                                                       const v1::ChatRequest* req) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx,
                                     const v1::TokenizeRequest* req,
                                     v1::TokenizeResponse* res) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const v1::ListModelsRequest* req,
                                       v1::ListModelsResponse* res) override;

 private:
  grpc::Status authorize(grpc::CallbackServerContext* ctx) const;
  grpc::Status tokenize(const v1::TokenizeRequest& req, v1::TokenizeResponse& res) const;
  ModelHub& hub_;
  const ApiKeys& keys_;
};

grpc::StatusCode grpc_code(ApiCode code);

}  // namespace mixserve
